package usage

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strings"
)

// Money is an exact amount of a currency: an unsigned integer count of
// 10^-MoneyScale units in 128 bits. A cost is a ledger quantity (an integer
// in the ledger's units) times a unit price (an integer count of
// 10^-PriceScale units), so it is exact at this scale: nothing is rounded,
// and the sum of an export's BilledCost equals the totals on the pages to
// the last digit. It holds up to about 3.4 × 10^16 currency units.
type Money struct{ hi, lo uint64 }

// MoneyScale is the decimals of Money: GiB-seconds need 13 (MiB-ms / 1024000
// ends after 13 digits) and prices have PriceScale.
const MoneyScale = 13 + PriceScale

// PriceScale is the decimals a unit price may have (nano-units: 0.0000045).
const PriceScale = 9

// Add returns m + n (saturating: the bound is far beyond any bill).
func (m Money) Add(n Money) Money {
	lo, c := bits.Add64(m.lo, n.lo, 0)
	hi, c := bits.Add64(m.hi, n.hi, c)
	if c != 0 {
		return Money{math.MaxUint64, math.MaxUint64}
	}
	return Money{hi, lo}
}

// IsZero reports a zero amount.
func (m Money) IsZero() bool { return m.hi == 0 && m.lo == 0 }

// Cmp is -1, 0 or +1 as m is less than, equal to or more than n.
func (m Money) Cmp(n Money) int {
	if c := cmp.Compare(m.hi, n.hi); c != 0 {
		return c
	}
	return cmp.Compare(m.lo, n.lo)
}

// Float64 is m as a float (to about 16 digits), for charts and for pages
// that round to cents.
func (m Money) Float64() float64 {
	return (float64(m.hi)*(1<<64) + float64(m.lo)) / 1e22 // 10^MoneyScale
}

// String is m as an exact decimal: no trailing zeros, "0" for nothing.
func (m Money) String() string { return string(appendDecimal(nil, m.hi, m.lo, MoneyScale)) }

// Round is m rounded half up to digits decimals (0 to MoneyScale), all of
// them printed: for pages and summaries that show cents.
func (m Money) Round(digits int) string {
	digits = min(max(digits, 0), MoneyScale)
	s := m.String()
	ip, fp, _ := strings.Cut(s, ".")
	if len(fp) <= digits {
		if digits == 0 {
			return ip
		}
		return ip + "." + fp + strings.Repeat("0", digits-len(fp))
	}
	// Round on the integer of the kept digits.
	n, _ := new(big.Int).SetString(ip+fp[:digits], 10)
	if fp[digits] >= '5' {
		n.Add(n, big.NewInt(1))
	}
	t := n.String()
	if len(t) <= digits {
		t = strings.Repeat("0", digits-len(t)+1) + t
	}
	if digits == 0 {
		return t
	}
	return t[:len(t)-digits] + "." + t[len(t)-digits:]
}

// MarshalJSON writes m as a JSON number with every digit.
func (m Money) MarshalJSON() ([]byte, error) { return appendDecimal(nil, m.hi, m.lo, MoneyScale), nil }

// UnmarshalJSON reads a JSON number (or a string holding one) of at most
// MoneyScale decimals.
func (m *Money) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := ParseMoney(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParseMoney reads a non-negative decimal of at most MoneyScale decimals.
func ParseMoney(s string) (Money, error) {
	ip, fp, _ := strings.Cut(s, ".")
	if len(fp) > MoneyScale || ip == "" && fp == "" {
		return Money{}, fmt.Errorf("amount %q: want a decimal with at most %d decimals", s, MoneyScale)
	}
	n, ok := new(big.Int).SetString(ip+fp+strings.Repeat("0", MoneyScale-len(fp)), 10)
	if !ok || n.Sign() < 0 || n.BitLen() > 128 {
		return Money{}, fmt.Errorf("amount %q: want a non-negative decimal", s)
	}
	lo := new(big.Int).And(n, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
	return Money{hi: new(big.Int).Rsh(n, 64).Uint64(), lo: lo}, nil
}

// mulMoney is q × a × b in 128 bits (saturating).
func mulMoney(q, a, b uint64) Money {
	hi, lo := bits.Mul64(q, a)
	// (hi·2^64 + lo) × b
	h1, l1 := bits.Mul64(lo, b)
	h2, l2 := bits.Mul64(hi, b)
	h, c := bits.Add64(h1, l2, 0)
	if h2 != 0 || c != 0 {
		return Money{math.MaxUint64, math.MaxUint64}
	}
	return Money{h, l1}
}

const pow19 = 1e19

// appendDecimal appends the 128-bit integer hi·2^64+lo divided by
// 10^scale as an exact decimal, trailing zeros of the fraction cut.
func appendDecimal(b []byte, hi, lo uint64, scale int) []byte {
	// Up to 39 digits, in chunks of 19 from the right.
	var digits [40]byte
	i := len(digits)
	for hi != 0 || lo != 0 {
		qh := hi / pow19
		ql, r := bits.Div64(hi%pow19, lo, pow19)
		hi, lo = qh, ql
		for k := 0; k < 19; k++ {
			i--
			digits[i] = byte('0' + r%10)
			r /= 10
			if hi == 0 && lo == 0 && r == 0 {
				break
			}
		}
	}
	d := digits[i:]
	if len(d) <= scale {
		// 0.000ddd
		b = append(b, '0')
		end := len(d)
		for end > 0 && d[end-1] == '0' {
			end--
		}
		if end == 0 {
			return b
		}
		b = append(b, '.')
		for range scale - len(d) {
			b = append(b, '0')
		}
		return append(b, d[:end]...)
	}
	ip, fp := d[:len(d)-scale], d[len(d)-scale:]
	b = append(b, ip...)
	end := len(fp)
	for end > 0 && fp[end-1] == '0' {
		end--
	}
	if end > 0 {
		b = append(b, '.')
		b = append(b, fp[:end]...)
	}
	return b
}

// appendScaled appends the non-negative integer n divided by 10^scale
// exactly.
func appendScaled(b []byte, n int64, scale int) []byte {
	return appendDecimal(b, 0, uint64(max(n, 0)), scale)
}

// Each meter's quantity is an integer in the ledger's units; times its
// factor it is in 10^-13 of the consumed unit (vCPU-Seconds from vCPU-ms,
// GiB-Seconds from MiB-ms: 10^13 / (1024 × 1000) = 5^10, CPU-Seconds from
// ns, GB from bytes). Times a unit price in 10^-PriceScale units, that is a
// cost in 10^-MoneyScale units.
const (
	quantityScale = 13
	toE13VCPU     = 10_000_000_000 // vCPU-ms
	toE13GiB      = 9_765_625      // MiB-ms
	toE13CPU      = 10_000         // ns
	toE13Egress   = 10_000         // bytes
)

// line is one meter of a ledger row: its quantity and unit price.
type line struct {
	qty   uint64 // in the ledger's units
	toE13 uint64
	price uint64 // 10^-PriceScale units per consumed unit
}

func (l line) cost() Money { return mulMoney(l.qty, l.price, l.toE13) }

// appendQuantity appends the quantity in its consumed unit, exactly.
func (l line) appendQuantity(b []byte) []byte {
	hi, lo := bits.Mul64(l.qty, l.toE13)
	return appendDecimal(b, hi, lo, quantityScale)
}

// lines are the four meters of a, in the order of the export's SKUs:
// vCPU, memory, CPU, egress.
func (a Sums) lines(p Price) [4]line {
	u := func(n int64) uint64 { return uint64(max(n, 0)) }
	return [4]line{
		{u(a.AllocVCPUMS), toE13VCPU, priceUnits(p.VCPUSecond)},
		{u(a.AllocMiBMS), toE13GiB, priceUnits(p.GiBSecond)},
		{u(a.CPUNS), toE13CPU, priceUnits(p.CPUSecond)},
		{u(a.EgressUpBytes) + u(a.EgressDownBytes), toE13Egress, priceUnits(p.EgressGB)},
	}
}

// Charge is what the quantities cost at p, exactly.
func (a Sums) Charge(p Price) Money {
	var m Money
	for _, l := range a.lines(p) {
		m = m.Add(l.cost())
	}
	return m
}

// priceUnits is a unit price in 10^-PriceScale units. A validated price has
// at most PriceScale decimals and is at most maxUnitPrice, so f × 10^9 is
// within 10^-3 of an integer and rounding it is exact.
func priceUnits(f float64) uint64 {
	if !(f > 0) {
		return 0
	}
	return uint64(math.Round(f * 1e9))
}
