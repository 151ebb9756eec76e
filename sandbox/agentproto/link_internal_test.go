package agentproto

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// recorder keeps each write apart.
type recorder struct{ writes [][]byte }

func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func yamuxHeader(typ uint8, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:8], 3)
	binary.BigEndian.PutUint32(h[8:12], length)
	return h
}

// TestHeaderJoiner: a yamux data header goes out with its body in one
// write; headers without a body (window update, ping, go-away) and a
// data header followed by something else pass unchanged and in order.
func TestHeaderJoiner(t *testing.T) {
	body := bytes.Repeat([]byte{7}, 100)
	tests := []struct {
		name   string
		writes [][]byte
		want   [][]byte
	}{
		{"data header and body", [][]byte{yamuxHeader(0, 100), body},
			[][]byte{append(yamuxHeader(0, 100), body...)}},
		{"window update alone", [][]byte{yamuxHeader(1, 1<<20), yamuxHeader(2, 9)},
			[][]byte{yamuxHeader(1, 1<<20), yamuxHeader(2, 9)}},
		{"zero-length data", [][]byte{yamuxHeader(0, 0), yamuxHeader(1, 5)},
			[][]byte{yamuxHeader(0, 0), yamuxHeader(1, 5)}},
		{"header then something else", [][]byte{yamuxHeader(0, 100), body[:10]},
			[][]byte{yamuxHeader(0, 100), body[:10]}},
		{"two frames", [][]byte{yamuxHeader(0, 100), body, yamuxHeader(1, 1), yamuxHeader(0, 10), body[:10]},
			[][]byte{append(yamuxHeader(0, 100), body...), yamuxHeader(1, 1), append(yamuxHeader(0, 10), body[:10]...)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			j := &headerJoiner{w: rec}
			for _, w := range tc.writes {
				if n, err := j.Write(w); n != len(w) || err != nil {
					t.Fatalf("Got(Write(%d bytes)) = %d, %v; want %d, nil", len(w), n, err, len(w))
				}
			}
			if len(rec.writes) != len(tc.want) {
				t.Fatalf("Got(%d writes) = %x; want %d: %x", len(rec.writes), rec.writes, len(tc.want), tc.want)
			}
			for i := range tc.want {
				if !bytes.Equal(rec.writes[i], tc.want[i]) {
					t.Errorf("Got(write %d) = %x; want %x", i, rec.writes[i], tc.want[i])
				}
			}
		})
	}
}
