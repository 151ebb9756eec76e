package sandboxinit

import "testing"

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "HOME=/home/sandbox"}, []string{"HOME=/workspace", "FOO=1", "PATH=/usr/bin"})
	want := []string{"PATH=/usr/bin", "HOME=/workspace", "FOO=1"}
	if len(got) != len(want) {
		t.Fatalf("Got(mergeEnv()) = %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Got(mergeEnv()) = %v; want %v", got, want)
			break
		}
	}
	if v := envValue(got, "HOME"); v != "/workspace" {
		t.Errorf("Got(envValue(HOME)) = %q; want /workspace", v)
	}
}
