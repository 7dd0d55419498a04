//go:build !linux

package offload

// Spare files need O_TMPFILE (spare_linux.go); elsewhere every staged
// write creates its file through a temporary file.

func refillSpare(string) {}

func (o *Offloader) writeSpare(path, text string) (done bool, err error) { return false, nil }
