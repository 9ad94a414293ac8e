//! Memory the agent no longer uses, given back to the node. An idle agent
//! is paid for on every node of a fleet, so what start-up and a drain
//! leave behind matters more than what they use while they run:
//!
//! - the allocator's free pages: glibc keeps what a start-up's lists and
//!   a drain's decoding freed, in each thread's arena (`malloc_trim`);
//! - the pages of the agent's own binary that start-up or a drain ran and
//!   an idle agent does not: most of its code. `madvise(MADV_PAGEOUT)` on
//!   its read-only mappings lets the kernel drop them; a page run again is
//!   read back on its first touch, as at start-up.
//!
//! Both are hints: a kernel without `MADV_PAGEOUT` (before 5.4) refuses it
//! and the pages stay, as they did before. Nothing here can fail the agent.

use std::ptr::NonNull;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::drain::progress::{EventKind, Progress};

/// At most this many allocator arenas. glibc gives threads arenas of
/// their own up to eight per core, each keeping its own free memory; the
/// agent's few threads allocate little and rarely at once, so two are
/// enough and hold less.
const ARENAS: i32 = 2;

/// Caps the allocator's arenas. Call once, before the runtime starts its
/// threads.
pub fn limit_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of glibc's allocator; it is
    // called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// What [`give_back`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GivenBack {
    /// Bytes of the binary's mappings the kernel was asked to drop.
    pub binary_bytes: usize,
    /// Whether the kernel took the hint (false: it does not know it).
    pub paged_out: bool,
}

/// Gives back the allocator's free pages and the binary's pages.
pub fn give_back() -> GivenBack {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim walks glibc's own arenas under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
    page_out_binary()
}

/// The read-only mappings of the running binary, from /proc/self/maps:
/// (start address, length).
fn binary_mappings() -> Vec<(usize, usize)> {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    let exe = exe.to_string_lossy().into_owned();
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    readonly_mappings_of(&maps, &exe)
}

/// In `maps` (the format of /proc/PID/maps), the mappings of file `path`
/// that are not writable: its code and read-only data, which the kernel
/// can always read back from the file.
pub fn readonly_mappings_of(maps: &str, path: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let file = line.splitn(6, char::is_whitespace).nth(5)?.trim();
            // A binary replaced on disk while it runs reads "(deleted)".
            let file = file.strip_suffix(" (deleted)").unwrap_or(file);
            if file != path || perms.as_bytes().get(1) != Some(&b'-') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then(|| (start, end - start))
        })
        .collect()
}

fn page_out_binary() -> GivenBack {
    let mut out = GivenBack::default();
    for (start, len) in binary_mappings() {
        out.binary_bytes += len;
        // SAFETY: the range is a whole mapping of this process's own
        // binary, read-only, from /proc/self/maps.
        out.paged_out |= unsafe { page_out(start, len) };
    }
    out
}

/// Asks the kernel to drop the resident pages of `len` bytes at `start`;
/// false if it does not take the hint.
///
/// # Safety
/// The range must be mapped read-only from a file: MADV_PAGEOUT then
/// changes no content, only which pages are resident (a clean file page is
/// read back on its next touch).
unsafe fn page_out(start: usize, len: usize) -> bool {
    let Some(addr) = NonNull::new(start as *mut std::ffi::c_void) else {
        return false;
    };
    // SAFETY: as the caller promises.
    unsafe { nix::sys::mman::madvise(addr, len, nix::sys::mman::MmapAdvise::MADV_PAGEOUT) }.is_ok()
}

/// After start-up, when its last writes (the first status, the Node's
/// condition) are done too.
const AFTER_START: Duration = Duration::from_secs(30);
/// And from time to time: a relist after an API server restart, or a
/// burst of the endpoint's readers, leaves memory behind too.
const EVERY: Duration = Duration::from_secs(600);

/// Gives memory back once the agent has started (its views of the node
/// and its pods listed, then [`AFTER_START`] later), each time a drain or
/// its undo ends (the moments after which much of what was used is not
/// used again soon), and every [`EVERY`].
pub async fn keep_low(
    progress: Progress,
    synced: impl Future<Output = ()>,
    stop: CancellationToken,
) {
    let mut events = progress.subscribe();
    tokio::select! {
        _ = synced => {}
        _ = stop.cancelled() => return,
    }
    let first = give_back();
    tracing::debug!(?first, "memory given back after start-up");
    let mut next = tokio::time::Instant::now() + AFTER_START;
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = tokio::time::sleep_until(next) => {
                give_back();
                next = tokio::time::Instant::now() + EVERY;
                continue;
            }
            _ = stop.cancelled() => return,
        };
        match ev {
            Ok(ev)
                if matches!(
                    ev.event,
                    EventKind::DrainCompleted
                        | EventKind::UndoCompleted
                        | EventKind::DrainFailed
                        | EventKind::DrainCancelled
                ) =>
            {
                give_back();
            }
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
5617ce952000-5617cebca000 r--p 00000000 fe:00 5358157                    /usr/bin/maintd
5617cebca000-5617cf329000 r-xp 00277000 fe:00 5358157                    /usr/bin/maintd
5617cf329000-5617cf388000 r--p 009d5000 fe:00 5358157                    /usr/bin/maintd
5617cf388000-5617cf38d000 rw-p 00a33000 fe:00 5358157                    /usr/bin/maintd
5617db0f4000-5617db176000 rw-p 00000000 00:00 0                          [heap]
7f5b5694a000-7f5b56aa0000 r-xp 00026000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f5b56c4d000-7f5b56c4f000 r-xp 00033000 fe:00 1                          /usr/bin/maintd-other
";

    #[test]
    fn only_the_binarys_readonly_mappings_are_given_back() {
        let got = readonly_mappings_of(MAPS, "/usr/bin/maintd");
        assert_eq!(
            got,
            vec![
                (0x5617ce952000, 0x5617cebca000 - 0x5617ce952000),
                (0x5617cebca000, 0x5617cf329000 - 0x5617cebca000),
                (0x5617cf329000, 0x5617cf388000 - 0x5617cf329000),
            ]
        );
    }

    #[test]
    fn a_binary_replaced_on_disk_is_still_its_own() {
        let maps = "00400000-00500000 r-xp 00000000 fe:00 7 /usr/bin/maintd (deleted)\n";
        assert_eq!(
            readonly_mappings_of(maps, "/usr/bin/maintd"),
            vec![(0x400000, 0x100000)]
        );
    }

    #[test]
    fn lines_that_do_not_read_give_nothing() {
        for maps in [
            "",
            "garbage\n",
            "zz-yy r-xp 0 0:0 1 /usr/bin/maintd\n",
            "10-5 r-xp 0 0:0 1 /usr/bin/maintd\n",
        ] {
            assert!(
                readonly_mappings_of(maps, "/usr/bin/maintd").is_empty(),
                "{maps}"
            );
        }
    }

    /// The resident KiB of the mapping at `start`, from /proc/self/smaps.
    fn resident_kib_at(start: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let head = format!("{start:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// A read-only file mapping's pages leave the resident set when paged
    /// out (where the kernel takes the hint), and read back the same.
    #[test]
    fn a_read_only_file_mappings_pages_leave_the_resident_set() {
        use std::io::Write;
        use std::num::NonZeroUsize;
        const LEN: usize = 4 << 20;
        let mut file = tempfile::tempfile().unwrap();
        let content: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        file.write_all(&content).unwrap();
        // SAFETY: a fresh private read-only mapping of a file of LEN
        // bytes, read only through the slice below, unmapped at the end.
        let addr = unsafe {
            nix::sys::mman::mmap(
                None,
                NonZeroUsize::new(LEN).unwrap(),
                nix::sys::mman::ProtFlags::PROT_READ,
                nix::sys::mman::MapFlags::MAP_PRIVATE,
                &file,
                0,
            )
        }
        .unwrap();
        let start = addr.as_ptr() as usize;
        // SAFETY: the mapping is LEN readable bytes.
        let mapped = unsafe { std::slice::from_raw_parts(addr.as_ptr() as *const u8, LEN) };
        let sum = |b: &[u8]| b.iter().step_by(4096).map(|&x| x as u64).sum::<u64>();
        let expected = sum(&content);
        assert_eq!(sum(mapped), expected);
        let before = resident_kib_at(start);
        // SAFETY: the range is the read-only file mapping above.
        let taken = unsafe { page_out(start, LEN) };
        let after = resident_kib_at(start);
        if taken {
            assert!(
                after * 2 < before,
                "resident {before} KiB, then {after} KiB"
            );
        }
        assert_eq!(sum(mapped), expected, "what was paged out reads back");
        // SAFETY: unmapping what was mapped above, no longer used.
        unsafe { nix::sys::mman::munmap(addr, LEN) }.unwrap();
    }

    /// The agent finds its own binary's mappings to give back.
    #[test]
    fn giving_back_finds_the_binarys_mappings() {
        assert!(give_back().binary_bytes > 0);
    }
}
