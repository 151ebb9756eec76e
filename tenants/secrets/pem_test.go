package secrets_test

import (
	"encoding/pem"
	"errors"
)

func pemBlock(s string) ([]byte, error) {
	b, _ := pem.Decode([]byte(s))
	if b == nil {
		return nil, errors.New("not PEM")
	}
	return b.Bytes, nil
}
