package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/api"
)

// ErrNoSpace: a write was refused because the file system holding the data
// would have less free space than the configured reserve after it
// (storage.min_free_bytes). Nothing was written. It answers as the API
// code insufficient_storage (HTTP 507); a *SpaceError gives the figures.
var ErrNoSpace error = api.NewCoded(api.InsufficientStorage, "insufficient storage").Answer(func(error) *api.Error {
	return &api.Error{Code: api.InsufficientStorage, Message: "the disk is full: ctxd refuses writes below its free-space reserve; nothing was stored"}
})

// DefaultReserve is storage.min_free_bytes' default, in bytes (128 MiB).
//
// Why a reserve at all: badger writes its value log, write-ahead log and
// tables through memory-mapped files, and a store of a page on a full file
// system is a SIGBUS that kills the process (and kills it again at every
// start while badger replays its logs). The guard must refuse writes while
// there is still room for what badger writes on its own: a memtable flush
// (an SSTable of up to MemTableSize), a level compaction (a few BaseTableSize
// tables), and the in-flight write itself (at most api.MaxRequestBytes, 32
// MiB, for one request plus its offloaded copy). 128 MiB covers the sum with
// a margin; a small disk can lower it (tests use a few MiB on a tmpfs).
const DefaultReserve = 128 << 20

// SpaceError is the error of a refused write: where, how much is free, and
// how much was needed. It wraps ErrNoSpace.
type SpaceError struct {
	// Dir is the directory whose file system is full.
	Dir string
	// Free is the space available to ctxd there, in bytes.
	Free uint64
	// Need is the space the write needed on top of Reserve, in bytes.
	Need uint64
	// Reserve is storage.min_free_bytes.
	Reserve uint64
}

// APIError answers insufficient_storage with e's figures.
func (e *SpaceError) APIError(error) *api.Error {
	return &api.Error{Code: api.InsufficientStorage, Message: e.Error() + "; nothing was stored"}
}

func (e *SpaceError) Error() string {
	return fmt.Sprintf("%v: %s has %s free; ctxd keeps %s free (storage.min_free_bytes) and this write needs %s more: free some space",
		ErrNoSpace, e.Dir, FormatBytes(e.Free), FormatBytes(e.Reserve), FormatBytes(e.Need))
}

// Unwrap returns ErrNoSpace.
func (e *SpaceError) Unwrap() error { return ErrNoSpace }

// FreeBytes returns the bytes available to an unprivileged writer on the
// file system holding dir (statfs f_bavail × f_bsize). A dir that does not
// exist yet (an offload directory is created on first use) is measured at
// its nearest existing parent. Errors: statfs's.
func FreeBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	p := dir
	for {
		err := unix.Statfs(p, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, unix.ENOENT) || parent == p {
			return 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		p = parent
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Space guards the free space of one directory's file system: Check is
// called before every write with the write's size, and refuses it when the
// file system would keep less than Reserve free. A nil *Space allows
// everything (in-memory stores). Safe for concurrent use.
type Space struct {
	dir     string
	reserve uint64
	free    func(string) (uint64, error)

	low atomic.Bool
}

// NewSpace returns the guard of dir with reserve bytes kept free. free
// reads the free space (nil means FreeBytes; tests inject their own).
func NewSpace(dir string, reserve uint64, free func(string) (uint64, error)) *Space {
	if free == nil {
		free = FreeBytes
	}
	return &Space{dir: dir, reserve: reserve, free: free}
}

// Dir is the guarded directory.
func (s *Space) Dir() string { return s.dir }

// Reserve is the number of bytes kept free.
func (s *Space) Reserve() uint64 { return s.reserve }

// Check refuses a write of need bytes that would leave less than the
// reserve free: a *SpaceError (wrapping ErrNoSpace). A statfs failure is
// returned as is (the write is refused too: a file system ctxd cannot even
// stat is no place to write). A nil s allows everything.
func (s *Space) Check(need uint64) error {
	if s == nil {
		return nil
	}
	free, err := s.free(s.dir)
	if err != nil {
		return err
	}
	if free < s.reserve || free-s.reserve < need {
		s.low.Store(true)
		return &SpaceError{Dir: s.dir, Free: free, Need: need, Reserve: s.reserve}
	}
	s.low.Store(false)
	return nil
}

// State reads the free space now and says whether writes are being
// refused: it is below the reserve, or the last Check was refused (a write
// bigger than the space above the reserve) and none has passed since. It
// feeds the disk_low metric and ctxctl doctor. A nil s is never low.
func (s *Space) State() (free uint64, low bool, err error) {
	if s == nil {
		return 0, false, nil
	}
	free, err = s.free(s.dir)
	if err != nil {
		return 0, false, err
	}
	low = free < s.reserve || s.low.Load()
	if free < s.reserve {
		s.low.Store(true)
	}
	return free, low, nil
}

// Low reports the outcome of the last Check or State: true when the last
// write was refused for space.
func (s *Space) Low() bool { return s != nil && s.low.Load() }

// FormatBytes writes n in binary units with one decimal (e.g. "12.5 MiB").
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// spaces maps a badger directory to its guard: Open registers it (with
// Options.Space) and every Committer of that database checks it before a
// write, so checkpoint/ and artifacts/ need not carry it.
var spaces sync.Map // string → *Space

func registerSpace(dir string, s *Space) {
	if s == nil {
		spaces.Delete(dir)
		return
	}
	spaces.Store(dir, s)
}

func spaceOf(dir string) *Space {
	if dir == "" {
		return nil
	}
	v, ok := spaces.Load(dir)
	if !ok {
		return nil
	}
	return v.(*Space)
}
