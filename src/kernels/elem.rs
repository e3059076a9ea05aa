//! The element trait of the kernels ([`Elem`], sealed to `f32` and `f64`): the arithmetic and
//! conversions their generic bodies use, each inlined so that loops compiled inside `pulp`'s
//! SIMD contexts vectorise.

/// Element types the kernels support.
pub trait Elem:
    Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::AddAssign
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// `e^self`.
    fn exp(self) -> Self;
    /// `self * a + b` with one rounding (an FMA instruction where the CPU has one; the
    /// gradient kernel runs inside `pulp`'s AVX2/AVX-512 context, where it does).
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Widening conversion.
    fn to_f64(self) -> f64;
    /// Narrowing conversion.
    fn from_f64(v: f64) -> Self;
    /// Exact conversion of a small code (a float compare vectorises beside float data where a
    /// byte compare did not).
    fn from_u8(v: u8) -> Self;
}
impl Elem for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn exp(self) -> Self {
        f32::exp(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f32::mul_add(self, a, b)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn from_u8(v: u8) -> Self {
        Self::from(v)
    }
}
impl Elem for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f64::mul_add(self, a, b)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn from_u8(v: u8) -> Self {
        Self::from(v)
    }
}
