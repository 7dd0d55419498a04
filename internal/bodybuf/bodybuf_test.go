package bodybuf

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestPooledBodyIsHeldUntilItsReadersClose: an outgoing body pointing into
// a pooled request buffer keeps it while a reader of it is open, after the
// request released it; a closed reader reads nothing more, and no reader
// is made once every holder let go.
func TestPooledBodyIsHeldUntilItsReadersClose(t *testing.T) {
	bb := Get(100 << 10)
	if bb == nil || len(bb.B) != 100<<10 {
		t.Fatalf("Get(100 KiB) = %v, want a pooled buffer of that length", bb)
	}
	for i := range bb.B {
		bb.B[i] = byte('a' + i%26)
	}
	want := append(append(append([]byte(nil), bb.B[:10]...), "[1,2]"...), bb.B[50:]...)
	o := New(bb, 3)
	o.Add(bb.B[:10])
	o.Add([]byte("[1,2]"))
	o.Add(bb.B[50:])
	if o.Len() != len(want) || !bytes.Equal(o.Bytes(), want) {
		t.Fatalf("Body: %d bytes, want %d", o.Len(), len(want))
	}
	r1, err := o.Reader()
	if err != nil {
		t.Fatal(err)
	}
	r2, err := o.Reader() // as GetBody would
	if err != nil {
		t.Fatal(err)
	}
	bb.Release() // the request is done
	if n := bb.refs.Load(); n != 2 {
		t.Fatalf("holders after the request released its buffer: %d, want 2 (the open readers)", n)
	}
	got, err := io.ReadAll(r1)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Read: %d bytes (err %v), want the body's %d", len(got), err, len(want))
	}
	var w bytes.Buffer
	if _, err := r2.(io.WriterTo).WriteTo(&w); err != nil || !bytes.Equal(w.Bytes(), want) {
		t.Fatalf("WriteTo: %d bytes (err %v), want the body's %d", w.Len(), err, len(want))
	}
	_ = r1.Close()
	_ = r1.Close() // a second Close releases nothing more
	if n := bb.refs.Load(); n != 1 {
		t.Fatalf("holders after one reader closed twice: %d, want 1", n)
	}
	_ = r2.Close()
	if n := bb.refs.Load(); n != 0 {
		t.Fatalf("holders after every reader closed: %d, want 0", n)
	}
	if _, err := r2.Read(make([]byte, 1)); !errors.Is(err, ErrGone) {
		t.Fatalf("Read after Close: %v, want ErrGone", err)
	}
	if _, err := o.Reader(); !errors.Is(err, ErrGone) {
		t.Fatalf("reader of a released body: %v, want ErrGone", err)
	}
	if Get(MinPooled-1) != nil || Get(MaxPooled+1) != nil {
		t.Fatal("bodies outside the pooled sizes got a pooled buffer")
	}
}
