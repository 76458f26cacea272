//! A tiny pseudo-random generator for jitter.
//!
//! The reader's reconnect backoff needs a few random-looking bits so that
//! many clients dropped at once do not reconnect in lockstep; nothing here
//! needs statistical quality or unpredictability, so this is a xorshift64
//! (Marsaglia) rather than a dependency on `rand`. It is also seedable, so
//! a caller that wants reproducible choices (the `mcp-resume chaos` harness
//! and its `--seed`) can use the same generator.

/// A xorshift64 generator: deterministic from its seed, not for anything
/// that must be unpredictable (tokens, ids, keys).
#[derive(Clone, Debug)]
pub struct Xorshift64(u64);

impl Xorshift64 {
    /// A generator from `seed` (its lowest bit is set: zero is a fixed point
    /// of xorshift).
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// A generator seeded from the wall clock's nanoseconds.
    pub fn from_time() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        Self::new(seed)
    }

    /// The next raw value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `lo..=hi` (modulo bias is fine for jitter). `lo <= hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        match (hi - lo).checked_add(1) {
            Some(n) => lo + self.next_u64() % n,
            None => self.next_u64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Xorshift64;

    #[test]
    fn deterministic_and_never_stuck_at_zero() {
        let (mut a, mut b) = (Xorshift64::new(0), Xorshift64::new(0));
        for _ in 0..100 {
            let x = a.next_u64();
            assert_ne!(x, 0);
            assert_eq!(x, b.next_u64());
        }
    }

    #[test]
    fn known_sequence() {
        // xorshift64 (13, 7, 17) from 1.
        let mut r = Xorshift64::new(1);
        assert_eq!(r.next_u64(), 1_082_269_761);
    }

    #[test]
    fn range_is_inclusive_and_bounded() {
        let mut r = Xorshift64::new(42);
        let mut seen = [false; 4];
        for _ in 0..1000 {
            let v = r.range(3, 6);
            assert!((3..=6).contains(&v));
            seen[(v - 3) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(r.range(5, 5), 5);
        let _ = r.range(0, u64::MAX);
    }
}
