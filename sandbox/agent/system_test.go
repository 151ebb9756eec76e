package agent

import "testing"

func TestParseLoadavg(t *testing.T) {
	tests := []struct {
		in          string
		l1, l5, l15 float64
		wantErr     bool
	}{
		{"0.52 0.31 0.10 1/123 4567\n", 0.52, 0.31, 0.10, false},
		{"0.00 0.00 0.00 1/1 1", 0, 0, 0, false},
		{"0.5 0.3", 0, 0, 0, true},
		{"x 0.3 0.1 1/1 1", 0, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			l1, l5, l15, err := parseLoadavg(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Got(parseLoadavg(%q) error) = %v; want error %v", tc.in, err, tc.wantErr)
			}
			if l1 != tc.l1 || l5 != tc.l5 || l15 != tc.l15 {
				t.Errorf("Got(parseLoadavg(%q)) = %v %v %v; want %v %v %v", tc.in, l1, l5, l15, tc.l1, tc.l5, tc.l15)
			}
		})
	}
}

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name         string
		in           string
		total, avail uint64
		wantErr      bool
	}{
		{"guest", "MemTotal:         468416 kB\nMemFree:          400000 kB\nMemAvailable:     422208 kB\n", 468416 * 1024, 422208 * 1024, false},
		{"no available", "MemTotal:         468416 kB\nMemFree:          400000 kB\n", 0, 0, true},
		{"garbage", "MemTotal: lots\nMemAvailable: 1 kB\n", 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			total, avail, err := parseMeminfo(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Got(parseMeminfo() error) = %v; want error %v", err, tc.wantErr)
			}
			if total != tc.total || avail != tc.avail {
				t.Errorf("Got(parseMeminfo()) = %d, %d; want %d, %d", total, avail, tc.total, tc.avail)
			}
		})
	}
}
