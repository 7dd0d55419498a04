package offload

import (
	"errors"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Spare files: a staged offload (Stage) writes its file before the request
// is forwarded, and creating a file is most of that write's time (the
// file system's inode allocation: ~0.25 ms on ext4, against ~0.05 ms for
// writing 21 KB into a file already open and naming it). So a file is
// created ahead, off that path, without a name (O_TMPFILE: nothing is
// left behind if the process dies), and a staged write fills one and
// gives it its name with linkat, whole: a reader never sees a part of it
// under the name, as with the temporary file renamed into place. The
// commit that makes the staged file durable (Pending.Finish) creates the
// next spare. Where the file system cannot make unnamed files or link
// them, the directory is marked and the temporary file is used.

// sparesPerDir is how many spare files an offload directory keeps: a
// request usually carries one new tool result, a parallel tool round a
// few.
const sparesPerDir = 2

// maxSpares bounds the spare files (and so the descriptors) held by the
// process across all directories; past it the oldest is closed (a test
// binary makes many directories).
const maxSpares = 8

type spareFile struct {
	dir string
	f   *os.File
}

var spares struct {
	mu    sync.Mutex
	files []spareFile
	// off: directories whose file system makes or links no unnamed file.
	off map[string]bool
}

// takeSpare returns a spare file created in dir, or nil when there is
// none.
func takeSpare(dir string) *os.File {
	spares.mu.Lock()
	defer spares.mu.Unlock()
	for i := len(spares.files) - 1; i >= 0; i-- {
		if spares.files[i].dir == dir {
			f := spares.files[i].f
			spares.files = append(spares.files[:i], spares.files[i+1:]...)
			return f
		}
	}
	return nil
}

// refillSpare creates a spare file in dir unless it holds sparesPerDir
// already or its file system cannot make them. Errors are not returned:
// without a spare the next write creates its file itself.
func refillSpare(dir string) {
	if dir == "" {
		return
	}
	spares.mu.Lock()
	n := 0
	for _, s := range spares.files {
		if s.dir == dir {
			n++
		}
	}
	off := spares.off[dir]
	spares.mu.Unlock()
	if off || n >= sparesPerDir {
		return
	}
	f, err := newSpare(dir)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			markNoSpares(dir)
		}
		return
	}
	spares.mu.Lock()
	defer spares.mu.Unlock()
	if len(spares.files) >= maxSpares {
		spares.files[0].f.Close()
		spares.files = spares.files[1:]
	}
	spares.files = append(spares.files, spareFile{dir: dir, f: f})
}

func markNoSpares(dir string) {
	spares.mu.Lock()
	defer spares.mu.Unlock()
	if spares.off == nil {
		spares.off = map[string]bool{}
	}
	spares.off[dir] = true
}

// newSpare creates an unnamed file in dir (created if missing), mode
// FileMode whatever the umask.
func newSpare(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(FileMode))
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dir+"/(spare)")
	if err := f.Chmod(FileMode); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writeSpare writes text to a spare file of the Offloader's directory and
// links it at path. done is false when there was no spare, or it could
// not be linked at path (path exists: it is replaced by the temporary
// file's rename, as before): the caller then writes the file itself. A
// failed write of the text is returned with done true, as the temporary
// file's would be.
func (o *Offloader) writeSpare(path, text string) (done bool, err error) {
	f := takeSpare(o.dir)
	if f == nil {
		return false, nil
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		return true, err
	}
	// The descriptor's /proc link names the unnamed file (open(2),
	// O_TMPFILE); AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH.
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EEXIST):
	default:
		// No /proc, another file system under the session's directory,
		// a file system that links no unnamed file: not again here.
		markNoSpares(o.dir)
	}
	return false, nil
}
