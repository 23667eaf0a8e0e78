//! Each task's output files, kept open for reading, so that the controller can show a
//! rank's output while it runs (the dashboard's job page) without anyone finding the file
//! on the node.
//!
//! How the agent gets a descriptor without ever opening a user's file itself: the task's
//! child process opens its output files as the job's user, after giving up root, as it
//! always did; then it opens the same path once more for reading, still as the user,
//! checks that it is the very file it writes (same device and inode, a regular file) and
//! passes that descriptor to the agent over a socket pair (`pass_reader`, between fork
//! and exec) before it closes its own copy. So the agent reads only what the user could
//! read, and only the file the task writes: a path swapped for a link in between, a
//! device, a pipe or an output the user cannot read give no descriptor, and the rank's
//! output is then simply not shown. Nothing is opened by path with root's rights.
//!
//! The agent keeps the descriptors of running tasks, and of ended ones for
//! [`KEPT_AFTER_END`] (at most [`MAX_ENDED`] tasks), in an [`OutputKeeper`]; reads are
//! `pread`s ([`OutputKeeper::read`]), which never move the task's own file offset. A
//! restarted agent has no descriptors for the tasks it adopted: their output is read from
//! the files.

use cadre_proto::agent::{OutputPiece, OutputReadAnswer, OutputRequest, OutputStream, RunRef};
use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the output of an ended task can still be read through the agent.
pub const KEPT_AFTER_END: Duration = Duration::from_secs(10 * 60);

/// Ended tasks whose output is kept at most (the oldest go first).
pub const MAX_ENDED: usize = 256;

/// The share of the agent's open-file limit its kept readers may hold at most: past it,
/// ended tasks' go first, and a new task's output is not kept (the rest of the agent's
/// work needs descriptors: pipes, status files, cgroups, connections).
const FD_SHARE: u64 = 4;

/// Reads of output done at once at most; more are answered busy (a read of a file on a
/// hung network file system must not take every blocking thread of the agent).
pub const MAX_READS_AT_ONCE: usize = 8;

/// A task's output files, open for reading: `None` where the task passed no descriptor.
#[derive(Debug, Default)]
pub struct TaskReaders {
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    /// The task's standard error goes into its standard output file.
    pub stderr_in_stdout: bool,
}

/// Tags of the descriptors the child passes: which of its outputs each is.
const TAG_STDOUT: u8 = 1;
const TAG_STDERR: u8 = 2;

/// The two ends of the socket pair a task's child passes its readers over: the agent
/// keeps `receive`, the child gets `send`.
pub(crate) struct ReaderChannel {
    pub(crate) receive: OwnedFd,
    pub(crate) send: OwnedFd,
}

impl ReaderChannel {
    pub(crate) fn new() -> std::io::Result<ReaderChannel> {
        let mut fds = [-1; 2];
        // SAFETY: socketpair writes two descriptors into `fds` on success; both are then
        // owned here and by nothing else.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        unsafe {
            use std::os::fd::FromRawFd;
            Ok(ReaderChannel {
                receive: OwnedFd::from_raw_fd(fds[0]),
                send: OwnedFd::from_raw_fd(fds[1]),
            })
        }
    }
}

/// In the task's child, between fork and exec, as the job's user: opens `path` again for
/// reading and passes the descriptor over `channel` if it is the regular file `written`
/// is. System calls on stack data only: no allocation, no lock. Whatever fails, the task
/// goes on; its output is then not shown.
pub(crate) fn pass_reader(channel: &OwnedFd, written: &OwnedFd, path: &CStr, stderr: bool) {
    let Ok(w) = nix::sys::stat::fstat(written) else {
        return;
    };
    if w.st_mode & libc::S_IFMT != libc::S_IFREG {
        return;
    }
    // Not O_NOFOLLOW: opened with the user's identity, as the output file itself was, and
    // compared with it below.
    let flags = nix::fcntl::OFlag::O_RDONLY
        | nix::fcntl::OFlag::O_CLOEXEC
        | nix::fcntl::OFlag::O_NOCTTY
        | nix::fcntl::OFlag::O_NONBLOCK;
    let Ok(read) = nix::fcntl::open(path, flags, nix::sys::stat::Mode::empty()) else {
        return;
    };
    let Ok(r) = nix::sys::stat::fstat(&read) else {
        return;
    };
    if r.st_dev != w.st_dev || r.st_ino != w.st_ino {
        return;
    }
    let tag = if stderr { TAG_STDERR } else { TAG_STDOUT };
    send_fd(channel, &read, tag);
}

/// Control-message room for one descriptor, aligned as `cmsghdr` must be.
#[repr(C)]
union OneFdControl {
    header: libc::cmsghdr,
    bytes: [u8; 64],
}

/// A message header over one byte (`iov`, which points at it) and `control_len` bytes of
/// `control`. The header holds pointers to both: they must outlive its use.
fn one_byte_message(
    iov: &mut libc::iovec,
    control: &mut OneFdControl,
    control_len: usize,
) -> libc::msghdr {
    // SAFETY: a msghdr is plain data, all zeros a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = std::ptr::addr_of_mut!(*control).cast();
    msg.msg_controllen = control_len as _;
    msg
}

/// Sends `fd` with the one byte `tag` (sendmsg with SCM_RIGHTS, from stack buffers).
fn send_fd(channel: &OwnedFd, fd: &OwnedFd, tag: u8) {
    let mut byte = [tag];
    let mut control = OneFdControl { bytes: [0; 64] };
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: every pointer refers to a live stack buffer of the given length; the control
    // buffer is aligned for `cmsghdr` and larger than CMSG_SPACE of one descriptor (24
    // bytes on 64-bit Linux); CMSG_FIRSTHDR of a msghdr whose controllen covers a header
    // is that buffer's start.
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
        debug_assert!(space <= std::mem::size_of::<OneFdControl>());
        let msg = one_byte_message(&mut iov, &mut control, space);
        let header = libc::CMSG_FIRSTHDR(&msg);
        if header.is_null() {
            return;
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        let raw: libc::c_int = fd.as_raw_fd();
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), raw);
        libc::sendmsg(
            channel.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        );
    }
}

/// In the agent, once the child has exec'd (or failed): the descriptors it passed. Never
/// blocks; received descriptors are close-on-exec from the start (`MSG_CMSG_CLOEXEC`), so
/// no other task inherits them.
pub(crate) fn receive_readers(channel: &OwnedFd, stderr_in_stdout: bool) -> TaskReaders {
    let mut readers = TaskReaders {
        stderr_in_stdout,
        ..TaskReaders::default()
    };
    // Two at most: stdout's and stderr's.
    for _ in 0..2 {
        let Some((tag, file)) = receive_fd(channel) else {
            break;
        };
        match tag {
            TAG_STDOUT => readers.stdout = Some(file),
            TAG_STDERR => readers.stderr = Some(file),
            _ => {}
        }
    }
    readers
}

fn receive_fd(channel: &OwnedFd) -> Option<(u8, File)> {
    let mut byte = [0u8];
    let mut control = OneFdControl { bytes: [0; 64] };
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut msg = one_byte_message(&mut iov, &mut control, std::mem::size_of::<OneFdControl>());
    // SAFETY: as in `send_fd`; a descriptor found in an SCM_RIGHTS message is new in this
    // process and owned by nothing else.
    unsafe {
        let n = libc::recvmsg(
            channel.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n != 1 {
            return None;
        }
        let mut found: Option<File> = None;
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<libc::c_int>();
                let count = ((*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<libc::c_int>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    use std::os::fd::FromRawFd;
                    let file = File::from_raw_fd(fd);
                    // One is sent; any other is closed by dropping it.
                    if found.is_none() {
                        found = Some(file);
                    }
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return None;
        }
        found.map(|f| (byte[0], f))
    }
}

/// One task's kept readers.
#[derive(Debug)]
struct Kept {
    stdout: Option<Arc<File>>,
    stderr: Option<Arc<File>>,
    stderr_in_stdout: bool,
    ended: Option<Instant>,
}

/// The readers of this node's tasks, by run and `SLURM_PROCID`.
#[derive(Debug)]
pub struct OutputKeeper {
    inner: Mutex<Inner>,
    /// Descriptors kept at most.
    max_fds: usize,
    /// Reads under way.
    reads: std::sync::atomic::AtomicUsize,
}

impl Default for OutputKeeper {
    fn default() -> OutputKeeper {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        OutputKeeper::with_max_fds((soft / FD_SHARE).clamp(16, 65_536) as usize)
    }
}

#[derive(Debug, Default)]
struct Inner {
    tasks: HashMap<(RunRef, u32), Kept>,
    /// Ended tasks, oldest first.
    ended: VecDeque<(Instant, RunRef, u32)>,
    /// Descriptors held.
    fds: usize,
}

impl OutputKeeper {
    /// A keeper that holds at most `max_fds` descriptors.
    pub fn with_max_fds(max_fds: usize) -> OutputKeeper {
        OutputKeeper {
            inner: Mutex::default(),
            max_fds,
            reads: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Keeps task `procid` of `run`'s readers (replacing any it had), unless that would
    /// hold more than the keeper's share of descriptors even without ended tasks'.
    pub fn keep(&self, run: RunRef, procid: u32, readers: TaskReaders) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let n = usize::from(readers.stdout.is_some()) + usize::from(readers.stderr.is_some());
        if let Some(old) = inner.tasks.remove(&(run, procid)) {
            inner.fds -= old.fds();
        }
        while inner.fds + n > self.max_fds && !inner.ended.is_empty() {
            inner.drop_oldest_ended();
        }
        if inner.fds + n > self.max_fds {
            tracing::warn!(%run, procid, max = self.max_fds, "too many tasks' output kept open: this task's is not");
            return;
        }
        inner.fds += n;
        inner.tasks.insert(
            (run, procid),
            Kept {
                stdout: readers.stdout.map(Arc::new),
                stderr: readers.stderr.map(Arc::new),
                stderr_in_stdout: readers.stderr_in_stdout,
                ended: None,
            },
        );
    }

    /// Descriptors held now.
    pub fn fds(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.fds)
    }

    /// Every task of `run` on this node has ended: its output is kept for
    /// [`KEPT_AFTER_END`] more.
    pub fn ended(&self, run: RunRef) {
        let now = Instant::now();
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let mut ended = Vec::new();
        for ((r, procid), kept) in inner.tasks.iter_mut() {
            if *r == run && kept.ended.is_none() {
                kept.ended = Some(now);
                ended.push(*procid);
            }
        }
        ended.sort_unstable();
        for procid in ended {
            inner.ended.push_back((now, run, procid));
        }
        inner.prune(now);
    }

    /// Tasks whose readers are kept (running and ended).
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.tasks.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads what `r` asks of a task's output: from its `offset`, or the last `max` bytes;
    /// at most `max` bytes. Blocking (a `pread` of the file): call it off the async loop.
    pub fn read(&self, r: OutputRequest) -> OutputReadAnswer {
        let OutputRequest {
            run,
            task: procid,
            stream,
            offset,
            max,
        } = r;
        let unavailable = |why: String| OutputReadAnswer::Unavailable { why };
        use std::sync::atomic::Ordering;
        if self.reads.fetch_add(1, Ordering::AcqRel) >= MAX_READS_AT_ONCE {
            self.reads.fetch_sub(1, Ordering::AcqRel);
            return unavailable(format!(
                "the agent is busy with {MAX_READS_AT_ONCE} reads of output: try again"
            ));
        }
        struct Done<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            }
        }
        let _done = Done(&self.reads);
        let (file, ended) = {
            let Ok(mut inner) = self.inner.lock() else {
                return unavailable("the agent's output table is poisoned".into());
            };
            inner.prune(Instant::now());
            let Some(kept) = inner.tasks.get(&(run, procid)) else {
                return unavailable(format!(
                    "task {procid} of job {} (run {}) has no output kept on this node: it does not run here, it ended more than {} minutes ago, or the agent restarted since it started",
                    run.job,
                    run.run,
                    KEPT_AFTER_END.as_secs() / 60
                ));
            };
            let file = match stream {
                OutputStream::Stdout => kept.stdout.clone(),
                OutputStream::Stderr if kept.stderr_in_stdout => {
                    return unavailable(format!(
                        "task {procid}'s standard error goes into its standard output file"
                    ));
                }
                OutputStream::Stderr => kept.stderr.clone(),
            };
            let Some(file) = file else {
                return unavailable(format!(
                    "task {procid}'s output is not a regular file its user can read (a device, a pipe, or a path swapped while it started)"
                ));
            };
            (file, kept.ended.is_some())
        };
        match read_piece(&file, offset, max) {
            Ok(mut piece) => {
                piece.ended = ended;
                OutputReadAnswer::Piece(piece)
            }
            Err(e) => unavailable(format!("reading task {procid}'s output: {e}")),
        }
    }
}

impl Kept {
    fn fds(&self) -> usize {
        usize::from(self.stdout.is_some()) + usize::from(self.stderr.is_some())
    }
}

impl Inner {
    fn prune(&mut self, now: Instant) {
        while let Some(&(at, _, _)) = self.ended.front() {
            if now.duration_since(at) < KEPT_AFTER_END && self.ended.len() <= MAX_ENDED {
                break;
            }
            self.drop_oldest_ended();
        }
    }

    fn drop_oldest_ended(&mut self) {
        let Some((at, run, procid)) = self.ended.pop_front() else {
            return;
        };
        if self
            .tasks
            .get(&(run, procid))
            .is_some_and(|k| k.ended == Some(at))
            && let Some(k) = self.tasks.remove(&(run, procid))
        {
            self.fds -= k.fds();
        }
    }
}

/// Reads at most `max` bytes of `file` from `offset` (`None`: its last `max` bytes). A
/// UTF-8 character cut by the end of the read is left for the next read.
fn read_piece(file: &File, offset: Option<u64>, max: u32) -> std::io::Result<OutputPiece> {
    let size = file.metadata()?.len();
    let start = offset.unwrap_or(size.saturating_sub(u64::from(max)));
    let mut buf = vec![0u8; max as usize];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    let keep = whole_characters(&buf);
    buf.truncate(keep);
    Ok(OutputPiece {
        offset: start,
        next_offset: start + keep as u64,
        size,
        data: String::from_utf8_lossy(&buf).into_owned(),
        ended: false,
    })
}

/// How many of `bytes` to keep so that a UTF-8 character its end cuts is left out (all of
/// them when that would leave nothing, so that a read always moves on).
fn whole_characters(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=n.min(3) {
        let b = bytes[n - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if need > back && n > back { n - back } else { n };
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::job::JobId;
    use std::io::Write;

    fn run() -> RunRef {
        RunRef::job_run(JobId(7), 0)
    }

    fn request(
        run: RunRef,
        task: u32,
        stream: OutputStream,
        offset: Option<u64>,
        max: u32,
    ) -> OutputRequest {
        OutputRequest {
            run,
            task,
            stream,
            offset,
            max,
        }
    }

    #[test]
    fn a_character_cut_by_the_end_of_a_read_is_left_for_the_next() {
        let s = "a\u{e9}\u{20ac}\u{1f600}".as_bytes(); // 1, 2, 3 and 4 bytes
        assert_eq!(whole_characters(s), s.len());
        for cut in 1..4 {
            assert_eq!(whole_characters(&s[..s.len() - cut]), 6, "cut {cut}");
        }
        assert_eq!(whole_characters(&s[..2]), 1);
        assert_eq!(whole_characters(b"plain"), 5);
        // Nothing whole: kept anyway, so that a read moves on.
        assert_eq!(whole_characters(&s[6..8]), 2);
    }

    #[test]
    fn reads_follow_a_file_by_offset_and_tail_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut w = File::create(&path).unwrap();
        let keeper = OutputKeeper::default();
        keeper.keep(
            run(),
            3,
            TaskReaders {
                stdout: Some(File::open(&path).unwrap()),
                stderr: None,
                stderr_in_stdout: true,
            },
        );
        let read =
            |offset, max| match keeper.read(request(run(), 3, OutputStream::Stdout, offset, max)) {
                OutputReadAnswer::Piece(p) => p,
                other => panic!("{other:?}"),
            };
        let p = read(Some(0), 100);
        assert_eq!((p.data.as_str(), p.next_offset, p.size), ("", 0, 0));
        w.write_all(b"line 1\nline 2\n").unwrap();
        let p = read(Some(0), 100);
        assert_eq!(
            (p.data.as_str(), p.next_offset, p.ended),
            ("line 1\nline 2\n", 14, false)
        );
        w.write_all("\u{20ac}".as_bytes()).unwrap();
        let p = read(Some(p.next_offset), 3);
        assert_eq!((p.data.as_str(), p.next_offset), ("\u{20ac}", 17));
        let p = read(Some(13), 3);
        assert_eq!(
            (p.data.as_str(), p.next_offset),
            ("\n", 14),
            "the cut euro waits"
        );
        let p = read(Some(14), 2);
        assert_eq!(p.next_offset, 16, "a lone cut character is kept");
        let p = read(None, 7);
        assert_eq!((p.offset, p.data.as_str()), (10, "e 2\n\u{20ac}"));
        match keeper.read(request(run(), 3, OutputStream::Stderr, None, 10)) {
            OutputReadAnswer::Unavailable { why } => assert!(why.contains("standard output")),
            other => panic!("{other:?}"),
        }
        match keeper.read(request(run(), 4, OutputStream::Stdout, None, 10)) {
            OutputReadAnswer::Unavailable { why } => {
                assert!(why.contains("task 4 of job 7"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        keeper.ended(run());
        assert!(read(Some(0), 1).ended);
        assert_eq!(keeper.len(), 1);
    }

    #[test]
    fn kept_descriptors_stay_within_the_keeper_s_share_ended_tasks_going_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        File::create(&path).unwrap();
        let readers = || TaskReaders {
            stdout: Some(File::open(&path).unwrap()),
            stderr: Some(File::open(&path).unwrap()),
            stderr_in_stdout: false,
        };
        let keeper = OutputKeeper::with_max_fds(4);
        let other = RunRef::job_run(JobId(8), 0);
        keeper.keep(run(), 0, readers());
        keeper.keep(run(), 1, readers());
        assert_eq!(keeper.fds(), 4);
        // Full of running tasks: a new one's output is not kept.
        keeper.keep(other, 0, readers());
        assert_eq!((keeper.len(), keeper.fds()), (2, 4));
        // Once they end, a new one takes an ended one's place.
        keeper.ended(run());
        keeper.keep(other, 0, readers());
        assert_eq!((keeper.len(), keeper.fds()), (2, 4));
        assert!(matches!(
            keeper.read(request(other, 0, OutputStream::Stdout, None, 10)),
            OutputReadAnswer::Piece(_)
        ));
    }

    #[test]
    fn a_passed_reader_is_the_file_the_task_writes_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let channel = ReaderChannel::new().unwrap();
        let written: OwnedFd = File::create(&out).unwrap().into();
        let path = std::ffi::CString::new(out.as_os_str().as_encoded_bytes()).unwrap();
        pass_reader(&channel.send, &written, &path, false);
        // A path that names another file than the one written: nothing passed.
        let other = dir.path().join("other");
        std::fs::write(&other, "not the output").unwrap();
        let other_c = std::ffi::CString::new(other.as_os_str().as_encoded_bytes()).unwrap();
        pass_reader(&channel.send, &written, &other_c, true);
        // Not a regular file: nothing passed.
        let null: OwnedFd = File::options()
            .write(true)
            .open("/dev/null")
            .unwrap()
            .into();
        pass_reader(&channel.send, &null, c"/dev/null", true);
        let readers = receive_readers(&channel.receive, false);
        assert!(readers.stderr.is_none());
        let reader = readers.stdout.expect("stdout's reader");
        let flags = nix::fcntl::fcntl(&reader, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0, "received close-on-exec");
        std::fs::write(&out, "hello").unwrap();
        let mut s = String::new();
        use std::io::Read;
        (&reader).read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }
}
