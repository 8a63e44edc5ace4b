//! The one hash both sides use to name files on disk (session directories, the runner's and
//! the interpreter cache's directories): 64-bit FNV-1a, which stays the same across runs,
//! releases and platforms, unlike std's hasher. Changing it renames those files under existing
//! users, so its values are pinned by tests.

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// The 64-bit FNV-1a hash of `data`.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn values_are_the_published_fnv1a_64_ones() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
