package image

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// stripELF drops what the kernel never loads from a 64-bit little-endian
// static executable: the symbol table and debug sections, everything after
// the last loaded segment. Under TCG the guest kernel unpacks every byte of
// the initramfs (a Go agent built without -ldflags "-s -w" is a third
// larger). The section headers are kept, minus the dropped ones, with the
// section-name table moved behind the loaded data, so the result still
// reads as a normal ELF file. A file with nothing to drop comes back as is.
func stripELF(b []byte) ([]byte, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("strip: %w", err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("strip: %v %v: want a 64-bit little-endian ELF file", f.Class, f.Data)
	}
	var end uint64
	for _, p := range f.Progs {
		end = max(end, p.Off+p.Filesz)
	}
	if end == 0 || end > uint64(len(b)) {
		return nil, fmt.Errorf("strip: segments end at %d of %d bytes", end, len(b))
	}
	le := binary.LittleEndian
	const shentsize = 64
	shoff, shnum, shstrndx := le.Uint64(b[0x28:]), int(le.Uint16(b[0x3c:])), int(le.Uint16(b[0x3e:]))
	if shnum == 0 {
		return b[:end:end], nil
	}
	if int(le.Uint16(b[0x3a:])) != shentsize || shoff+uint64(shnum)*shentsize > uint64(len(b)) || shstrndx >= shnum {
		return nil, fmt.Errorf("strip: bad section header table")
	}
	shdr := func(i int) []byte { return b[shoff+uint64(i)*shentsize:][:shentsize] }

	// Keep the null section, what is loaded, and the name table.
	var keep []int
	newIndex := map[int]int{}
	for i := range shnum {
		h := shdr(i)
		flags := le.Uint64(h[8:])
		if i == 0 || i == shstrndx || flags&uint64(elf.SHF_ALLOC) != 0 {
			newIndex[i] = len(keep)
			keep = append(keep, i)
		}
	}
	names := shdr(shstrndx)
	namesOff, namesSize := le.Uint64(names[24:]), le.Uint64(names[32:])
	if namesOff+namesSize > uint64(len(b)) {
		return nil, fmt.Errorf("strip: section names beyond the file")
	}
	if len(keep) == shnum {
		return b, nil // nothing to drop
	}

	out := make([]byte, 0, end+namesSize+uint64(len(keep))*shentsize)
	out = append(out, b[:end]...)
	newNamesOff := uint64(len(out))
	out = append(out, b[namesOff:namesOff+namesSize]...)
	headers := make([]byte, 0, len(keep)*shentsize)
	for _, i := range keep {
		h := bytes.Clone(shdr(i))
		if link := int(le.Uint32(h[40:])); link != 0 {
			le.PutUint32(h[40:], uint32(newIndex[link])) // 0 when the linked section is gone
		}
		if i == shstrndx {
			le.PutUint64(h[24:], newNamesOff)
		}
		headers = append(headers, h...)
	}
	newShoff := shoff
	if shoff+uint64(shnum)*shentsize > end {
		// The table lay in the dropped part: put it at the end.
		newShoff = uint64(len(out))
		out = append(out, headers...)
	} else {
		table := out[shoff : shoff+uint64(shnum)*shentsize]
		clear(table)
		copy(table, headers)
	}
	le.PutUint64(out[0x28:], newShoff)
	le.PutUint16(out[0x3c:], uint16(len(keep)))
	le.PutUint16(out[0x3e:], uint16(newIndex[shstrndx]))
	return out, nil
}
