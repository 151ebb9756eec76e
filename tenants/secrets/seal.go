package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// sealVersion prefixes every ciphertext, so a later key or algorithm change
// can tell old rows from new ones.
const sealVersion = "v1:"

// sealer encrypts values at rest with AES-256-GCM under a key derived from
// the root key for this one purpose. The additional data binds a ciphertext
// to its row (tenant and object), so copying it elsewhere makes it fail.
type sealer struct{ aead cipher.AEAD }

// deriveKey makes a 32-byte key for purpose from the root key (HKDF-SHA256).
func deriveKey(root []byte, purpose string) ([]byte, error) {
	if len(root) < 32 {
		return nil, errors.New("root key: need at least 32 bytes")
	}
	k, err := hkdf.Key(sha256.New, root, nil, "stockade/"+purpose, 32)
	if err != nil {
		return nil, fmt.Errorf("derive %s key: %w", purpose, err)
	}
	return k, nil
}

func newSealer(root []byte) (*sealer, error) {
	key, err := deriveKey(root, "secrets-at-rest/v1")
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets cipher: %w", err)
	}
	return &sealer{aead: aead}, nil
}

// seal encrypts plain for the row named by ad, with a fresh random nonce.
func (s *sealer) seal(plain []byte, ad string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	out := s.aead.Seal(nonce, nonce, plain, []byte(ad))
	return sealVersion + base64.StdEncoding.EncodeToString(out), nil
}

// errOpen never says why: a wrong key, a tampered row and a moved row look
// alike, and the message must not help guess which.
var errOpen = errors.New("decrypt: authentication failed")

// open decrypts a value sealed for ad.
func (s *sealer) open(text, ad string) ([]byte, error) {
	body, ok := strings.CutPrefix(text, sealVersion)
	if !ok {
		return nil, fmt.Errorf("decrypt: unknown format")
	}
	raw, err := base64.StdEncoding.DecodeString(body)
	if err != nil || len(raw) < s.aead.NonceSize()+s.aead.Overhead() {
		return nil, errOpen
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(ad))
	if err != nil {
		return nil, errOpen
	}
	return plain, nil
}

// sealedAD is the additional data of a value sealed for other packages:
// its own namespace, so it can never pass for a secret ("secret/...") or a
// CA ("ca/...") row, nor for another purpose, tenant or object.
func sealedAD(purpose, tenantID, id string) string {
	return "sealed/" + purpose + "/" + tenantID + "/" + id
}

// Seal encrypts plain at rest under the secrets key, bound to purpose,
// tenant and object id (e.g. the cached answer of a token create, which
// holds the new token).
func (s *Store) Seal(purpose, tenantID, id string, plain []byte) (string, error) {
	return s.seal.seal(plain, sealedAD(purpose, tenantID, id))
}

// Open decrypts what Seal made for the same purpose, tenant and id.
func (s *Store) Open(purpose, tenantID, id, text string) ([]byte, error) {
	return s.seal.open(text, sealedAD(purpose, tenantID, id))
}
