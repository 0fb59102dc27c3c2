// The judge's side of assert-style Rust: start the candidate process, call it, fail.
#[allow(dead_code)]
pub mod rlx {
    use ::std::io::Write;
    use ::std::os::fd::FromRawFd;
    use ::std::os::unix::process::CommandExt;
    extern "C" {
        fn prctl(option: i32, ...) -> i32;
        fn pipe2(fds: *mut i32, flags: i32) -> i32;
        fn fcntl(fd: i32, cmd: i32, ...) -> i32;
        fn dup2(old: i32, new: i32) -> i32;
        fn close(fd: i32) -> i32;
        fn getppid() -> i32;
        fn kill(pid: i32, sig: i32) -> i32;
    }
    struct Conn { to: ::std::fs::File, from: ::std::fs::File, pid: i32 }
    static CONN: ::std::sync::Mutex<Option<Conn>> = ::std::sync::Mutex::new(None);
    pub fn fail(why: &str) -> ! {
        eprintln!("rlx: {}", why);
        let pid = CONN.lock().map(|c| c.as_ref().map(|c| c.pid)).unwrap_or(None);
        if let Some(pid) = pid { unsafe { kill(pid, 9); } }
        ::std::process::exit(3)
    }
    pub fn start() {
        let exe = ::std::env::current_exe().unwrap_or_else(|_| fail("cannot find the judge's own path"));
        let candidate = exe.with_file_name("candidate");
        unsafe {
            if prctl(4, 0usize, 0usize, 0usize, 0usize) != 0 { fail("prctl(PR_SET_DUMPABLE) failed"); }
            let (mut req, mut rep) = ([0i32; 2], [0i32; 2]);
            if pipe2(req.as_mut_ptr(), 0o2000000) != 0 || pipe2(rep.as_mut_ptr(), 0o2000000) != 0 { fail("pipe2 failed"); }
            let mut fds = [0i32; 4];
            for (k, fd) in [req[0], req[1], rep[0], rep[1]].into_iter().enumerate() {
                fds[k] = fcntl(fd, 1030, 10i32);
                close(fd);
                if fds[k] < 0 { fail("fcntl failed"); }
            }
            let parent = ::std::process::id() as i32;
            let (r0, w1) = (fds[0], fds[3]);
            let mut cmd = ::std::process::Command::new(&candidate);
            cmd.pre_exec(move || {
                prctl(1, 9usize, 0usize, 0usize, 0usize);
                if getppid() != parent || dup2(r0, 3) != 3 || dup2(w1, 4) != 4 {
                    return Err(::std::io::Error::from_raw_os_error(1));
                }
                Ok(())
            });
            let child = cmd.spawn().unwrap_or_else(|_| fail("cannot start the candidate"));
            close(r0);
            close(w1);
            let to = ::std::fs::File::from_raw_fd(fds[1]);
            let from = ::std::fs::File::from_raw_fd(fds[2]);
            *CONN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Conn { to, from, pid: child.id() as i32 });
        }
    }
    pub fn call(index: u32, args: Vec<u8>, name: &str) -> Vec<u8> {
        let reply = {
            let mut guard = CONN.lock().unwrap_or_else(|e| e.into_inner());
            let conn = guard.as_mut().unwrap_or_else(|| fail("no candidate process"));
            let mut m = index.to_le_bytes().to_vec();
            m.extend_from_slice(&args);
            let sent = super::rlx_wire::send_message(&mut conn.to, &m);
            let reply = if sent { super::rlx_wire::read_message(&mut conn.from, 256 << 20) } else { None };
            drop(guard);
            reply.unwrap_or_else(|| fail(&format!("no reply from the candidate to a call of {}", name)))
        };
        // the first byte: 0 a result follows, 1 the call panicked (its message follows)
        match reply.first() {
            Some(0) => reply[1..].to_vec(),
            Some(1) => {
                let mut r = super::rlx_wire::Rd { b: &reply[1..] };
                let what: Option<String> = super::rlx_wire::Get::get(&mut r);
                let what = done(what, &r, name);
                panic!("rlx: the candidate panicked in {}: {}", name, what)
            }
            _ => fail(&format!("the candidate's reply to {} could not be decoded", name)),
        }
    }
    pub fn done<T>(v: Option<T>, r: &super::rlx_wire::Rd, name: &str) -> T {
        match v {
            Some(v) if r.b.is_empty() => v,
            _ => fail(&format!("the candidate's reply to {} could not be decoded", name)),
        }
    }
    pub fn finish(ok: bool) -> ! {
        let _ = ::std::io::stdout().flush();
        let pid = CONN.lock().map(|c| c.as_ref().map(|c| c.pid)).unwrap_or(None);
        if let Some(pid) = pid { unsafe { kill(pid, 9); } }
        ::std::process::exit(if ok { 0 } else { 101 })
    }
}
