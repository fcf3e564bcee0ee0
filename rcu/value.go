package rcu

import "sync/atomic"

// Value is an rcu-protected pointer to a T: readers [Value.Load] it inside a
// read section (or on an online task) and use what they got until the
// section ends; writers publish a new version with [Value.Store],
// [Value.Update] or [Value.CompareAndSwap], and the old version is retired
// through [Domain.Call], so its retire function runs only after every
// reader that might hold it has let go.
//
// The zero Value is not usable; create one with [NewValue].
type Value[T any] struct {
	p      atomic.Pointer[T]
	d      *Domain
	retire func(*T)
}

// NewValue returns a [Value] in domain d holding initial (which may be nil).
// retire, if not nil, is called on each version replaced by a writer, after
// a grace period; use it to wipe or recycle the old version.
func NewValue[T any](d *Domain, initial *T, retire func(*T)) *Value[T] {
	v := &Value[T]{d: d, retire: retire}
	v.p.Store(initial)
	return v
}

// Load returns the current version. The result stays valid while the
// caller's read section lasts (or until the calling task's next quiescent
// state).
func (v *Value[T]) Load() *T { return v.p.Load() }

// Store publishes n and retires the previous version.
func (v *Value[T]) Store(n *T) { v.retireOld(v.p.Swap(n)) }

// CompareAndSwap publishes n if the current version is old, and then
// retires old. It reports whether it did.
func (v *Value[T]) CompareAndSwap(old, n *T) bool {
	if !v.p.CompareAndSwap(old, n) {
		return false
	}
	v.retireOld(old)
	return true
}

// Update publishes the version computed by fn from the current one,
// retrying if another writer published first, and retires the version it
// replaced. fn must not modify its argument: readers may be using it.
func (v *Value[T]) Update(fn func(cur *T) *T) {
	for {
		cur := v.p.Load()
		if v.CompareAndSwap(cur, fn(cur)) {
			return
		}
	}
}

func (v *Value[T]) retireOld(old *T) {
	if old == nil || v.retire == nil || old == v.p.Load() {
		// Nothing to retire, or old is still (again) the published version.
		return
	}
	retire := v.retire
	v.d.Call(func() { retire(old) })
}
