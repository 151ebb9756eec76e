package secrets

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// CA lifetime and leaf cache bound.
const (
	CATTL         = 10 * 365 * 24 * time.Hour
	maxLeafCache  = 4096
	leafRenewLeft = 24 * time.Hour
)

// caRow is a tenant's CA: the certificate in clear, the key sealed.
type caRow struct {
	TenantID      string `gorm:"primaryKey"`
	CertPEM       string
	KeyCiphertext string
	CreatedAt     time.Time
	ExpiresAt     time.Time
}

func (caRow) TableName() string { return "tenant_cas" }

func caAD(tenantID string) string { return "ca/" + tenantID }

// authority is a parsed CA ready to sign.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

type cachedLeaf struct {
	cert    *tls.Certificate
	renewAt time.Time
}

// CAPEM returns the tenant's CA certificate (PEM), making the CA on first
// use. Sandboxes of the tenant trust it.
func (s *Store) CAPEM(ctx context.Context, tenantID string) (string, error) {
	a, err := s.authority(ctx, tenantID)
	if err != nil {
		return "", err
	}
	return a.pem, nil
}

// authority returns the tenant's CA, from memory, the database, or made now.
func (s *Store) authority(ctx context.Context, tenantID string) (*authority, error) {
	s.mu.Lock()
	a := s.cas[tenantID]
	s.mu.Unlock()
	if a != nil {
		return a, nil
	}
	a, err := s.loadCA(ctx, tenantID)
	if errors.Is(err, gorm.ErrRecordNotFound) {
		a, err = s.createCA(ctx, tenantID)
	}
	if err != nil {
		return nil, fmt.Errorf("certificate authority of tenant %s: %w", tenantID, err)
	}
	s.mu.Lock()
	s.cas[tenantID] = a
	s.mu.Unlock()
	return a, nil
}

func (s *Store) loadCA(ctx context.Context, tenantID string) (*authority, error) {
	var r caRow
	if err := s.db.WithContext(ctx).Take(&r, "tenant_id = ?", tenantID).Error; err != nil {
		return nil, err
	}
	blk, _ := pem.Decode([]byte(r.CertPEM))
	if blk == nil {
		return nil, errors.New("stored CA certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	der, err := s.seal.open(r.KeyCiphertext, caAD(tenantID))
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	key, err := x509.ParseECPrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA key: %w", err)
	}
	return &authority{cert: cert, key: key, pem: r.CertPEM}, nil
}

// createCA makes an ECDSA P-256 CA valid 10 years and stores it; when
// another replica stored one first, theirs wins and is returned.
func (s *Store) createCA(ctx context.Context, tenantID string) (*authority, error) {
	s.creating.Lock()
	defer s.creating.Unlock()
	var t tenants.Tenant
	if err := s.db.WithContext(ctx).Take(&t, "id = ?", tenantID).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, errdefs.ErrNotFound
		}
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := s.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Stockade"}, CommonName: "Stockade egress CA for tenant " + t.Slug},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CATTL),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	sealed, err := s.seal.seal(keyDER, caAD(tenantID))
	if err != nil {
		return nil, err
	}
	r := caRow{TenantID: tenantID, CertPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		KeyCiphertext: sealed, CreatedAt: now, ExpiresAt: tmpl.NotAfter.UTC().Truncate(time.Microsecond)}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&r)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		return s.write(tx, audit.Actor{Kind: audit.ActorSystem, Name: "stockade"}.Event(tenantID, audit.TypeTenantCACreated,
			"tenant_ca", tenantID, map[string]any{"not_after": r.ExpiresAt, "algorithm": "ECDSA P-256"}))
	})
	if err != nil {
		return nil, fmt.Errorf("store CA: %w", err)
	}
	return s.loadCA(ctx, tenantID)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+).
		panic(err)
	}
	return n
}

// Leaf returns a certificate for host signed by the tenant's CA, cached in
// memory until a day before it expires.
func (s *Store) Leaf(ctx context.Context, tenantID, host string) (*tls.Certificate, error) {
	host = hostOnly(host)
	if host == "" {
		return nil, fmt.Errorf("leaf certificate: no host name: %w", errdefs.ErrInvalid)
	}
	k := tenantID + "\x00" + host
	now := s.clock.Now()
	s.mu.Lock()
	c := s.leaves[k]
	s.mu.Unlock()
	if c != nil && now.Before(c.renewAt) {
		return c.cert, nil
	}
	a, err := s.authority(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", host, err)
	}
	notAfter := now.Add(s.leafTTL)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"Stockade egress gateway"}, CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", host, err)
	}
	cert := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: key, Leaf: leaf}
	renew := notAfter.Add(-leafRenewLeft)
	if half := now.Add(notAfter.Sub(now) / 2); renew.Before(half) {
		renew = half
	}
	s.mu.Lock()
	if len(s.leaves) >= maxLeafCache {
		clear(s.leaves) // rare; reissuing is a millisecond
	}
	s.leaves[k] = &cachedLeaf{cert: cert, renewAt: renew}
	s.mu.Unlock()
	return cert, nil
}

// TLSConfig returns the server side of the gateway's TLS termination for
// the tenant: a leaf for each SNI name, signed by the tenant's CA. The CA is
// made now if needed, so a broken CA fails here, not mid-handshake.
func (s *Store) TLSConfig(ctx context.Context, tenantID string) (*tls.Config, error) {
	if _, err := s.authority(ctx, tenantID); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"}, // the swapper rewrites HTTP/1.1 only
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := strings.TrimSpace(hello.ServerName)
			if name == "" {
				return nil, errors.New("no server name (SNI) in the client hello")
			}
			return s.Leaf(hello.Context(), tenantID, name)
		},
	}, nil
}
