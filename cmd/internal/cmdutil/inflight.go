package cmdutil

import (
	"fmt"
	"strconv"
)

// InFlight is a flag for the bound on concurrent requests per model server:
// "auto" (0) adapts it to each server's load, a positive number fixes it.
type InFlight int

// UnmarshalText reads "auto" or a positive number.
func (f *InFlight) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "auto" {
		*f = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return fmt.Errorf("%q: want auto or a positive number of requests", s)
	}
	*f = InFlight(n)
	return nil
}

// String is "auto" or the fixed bound.
func (f InFlight) String() string {
	if f == 0 {
		return "auto"
	}
	return strconv.Itoa(int(f))
}
