//go:build !unix

package replay

import "os"

// lockNew holds no lock where flock is not available: a directory a killed
// replay left is then never reused (stableTempDir moves on to the next).
func lockNew(dir string) (*os.File, error) { return nil, nil }

// reclaim never reuses a directory where flock is not available.
func reclaim(dir string) *os.File { return nil }
