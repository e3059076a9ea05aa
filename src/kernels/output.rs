//! Output vectors built without a serial zero-fill: [`fill`] hands a kernel the uninitialised
//! storage as a [`Part`] that it splits across threads, each piece zero-filled by the thread
//! that then writes it.

use super::elem::Elem;

/// A kernel's output vector of `len` elements, built without `vec![0; len]`: that is one
/// serial pass over memory on the calling thread before the kernel's own parallel pass (~6 ms
/// of a Fashion-MNIST DUQ training step, for the convolutions' and batch norm's outputs).
/// [`fill`] hands the uninitialised storage to the kernel as one [`Part`], which it splits
/// across threads and chunks; each piece is zero-filled by [`Part::zeroed`] in the thread that
/// then writes it, just before, so the fill is parallel and the piece is in cache.
pub(crate) fn fill<T: Elem, R>(len: usize, f: impl FnOnce(Part<'_, T>) -> R) -> (Vec<T>, R) {
    let mut v: Vec<T> = Vec::with_capacity(len);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let r = f(Part {
        s: &mut v.spare_capacity_mut()[..len],
        done: &done,
    });
    let done = done.into_inner();
    assert_eq!(
        done, len,
        "fill: {done} of {len} output elements were initialised"
    );
    #[allow(unsafe_code)]
    // SAFETY: `len <= capacity`, and every one of the first `len` elements is initialised: the
    // only way to them is the one root `Part`, which can only be split into disjoint parts
    // (`split_at`, `chunks`) and consumed by `zeroed`, which writes every element of its part
    // before adding the part's length to `done`; `done == len` (asserted above) therefore
    // means that disjoint parts covering all `len` elements were written.
    unsafe {
        v.set_len(len);
    }
    (v, r)
}

/// Uninitialised storage of a [`fill`]ed vector: split it, then zero-fill each piece with
/// [`Part::zeroed`] to write into it.
pub(crate) struct Part<'a, T> {
    s: &'a mut [std::mem::MaybeUninit<T>],
    done: &'a std::sync::atomic::AtomicUsize,
}

impl<'a, T: Elem> Part<'a, T> {
    /// The first `mid` elements and the rest.
    pub(crate) fn split_at(self, mid: usize) -> (Self, Self) {
        let (a, b) = self.s.split_at_mut(mid);
        let done = self.done;
        (Self { s: a, done }, Self { s: b, done })
    }

    /// Consecutive parts of `n` elements (the last may be shorter).
    pub(crate) fn chunks(self, n: usize) -> impl Iterator<Item = Self> {
        let done = self.done;
        self.s.chunks_mut(n.max(1)).map(move |s| Self { s, done })
    }

    /// The part zero-filled, as initialised elements.
    pub(crate) fn zeroed(self) -> &'a mut [T] {
        for v in self.s.iter_mut() {
            v.write(T::ZERO);
        }
        self.done
            .fetch_add(self.s.len(), std::sync::atomic::Ordering::Relaxed);
        #[allow(unsafe_code)]
        // SAFETY: every element was initialised just above, and `MaybeUninit<T>` has the size,
        // alignment and layout of `T`: the same memory as a `[T]` of the same length, borrowed
        // exclusively for `'a` (the part is consumed).
        unsafe {
            &mut *(std::ptr::from_mut::<[std::mem::MaybeUninit<T>]>(self.s) as *mut [T])
        }
    }
}
