//go:build !linux

package bus

// freeSpace reports -1 (unknown) where rollfleet does not read file system
// statistics; the probe write alone then decides whether the store takes
// writes.
func freeSpace(string) (int64, error) { return -1, nil }
