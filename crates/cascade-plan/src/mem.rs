//! Memory made to be touched at once: what the plan's index and the
//! dashboard's tables of a 100,000-story run share.

/// `n` default values (zeros), written as the list is made rather than
/// allocated zeroed. A page of a zeroed allocation that is read before it
/// is written (a probed table, a count incremented, a maximum taken) is
/// mapped to the shared zero page, then copied on its first write, and that
/// copy interrupts every other core running the process to flush its TLB:
/// at 100,000 stories, hundreds of pages while a dashboard reads the run's
/// state and journal on the other core.
pub fn written_zeros<T: Copy + Default>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, T::default());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_are_made_to_the_length_asked() {
        assert_eq!(written_zeros::<u64>(5), [0; 5]);
        assert_eq!(written_zeros::<usize>(3), [0, 0, 0]);
        assert!(written_zeros::<usize>(0).is_empty());
    }
}
