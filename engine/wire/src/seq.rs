//! 32-bit sequence numbers with serial-number arithmetic (RFC 1982), so a stream
//! survives wrap-around: comparisons are correct while the two numbers compared
//! are less than 2^31 apart, which every window in this engine guarantees.

use core::fmt;

/// A frame sequence number. Compare with [`Seq::before`] / [`Seq::distance`],
/// never with the raw integers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// `self + n`, wrapping.
    #[inline]
    pub const fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping.
    #[inline]
    pub const fn sub(self, n: u32) -> Seq {
        Seq(self.0.wrapping_sub(n))
    }

    /// The next sequence number.
    #[inline]
    pub const fn next(self) -> Seq {
        self.add(1)
    }

    /// Signed distance from `earlier` to `self`: positive when `self` comes after.
    #[inline]
    pub const fn distance(self, earlier: Seq) -> i32 {
        self.0.wrapping_sub(earlier.0) as i32
    }

    /// True when `self` comes strictly before `other`.
    #[inline]
    pub const fn before(self, other: Seq) -> bool {
        self.distance(other) < 0
    }

    /// True when `self` comes strictly after `other`.
    #[inline]
    pub const fn after(self, other: Seq) -> bool {
        self.distance(other) > 0
    }

    /// The later of two sequence numbers.
    #[inline]
    pub const fn max(self, other: Seq) -> Seq {
        if self.before(other) {
            other
        } else {
            self
        }
    }

    /// The earlier of two sequence numbers.
    #[inline]
    pub const fn min(self, other: Seq) -> Seq {
        if self.before(other) {
            self
        } else {
            other
        }
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_survives_wrap_around() {
        let a = Seq(u32::MAX - 1);
        let b = a.add(3);
        assert_eq!(b, Seq(1));
        assert!(a.before(b));
        assert!(b.after(a));
        assert_eq!(b.distance(a), 3);
        assert_eq!(a.distance(b), -3);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
        assert_eq!(b.sub(3), a);
    }

    #[test]
    fn equal_is_neither_before_nor_after() {
        let a = Seq(7);
        assert!(!a.before(a));
        assert!(!a.after(a));
        assert_eq!(a.distance(a), 0);
    }
}
