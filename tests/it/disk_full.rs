//! A data directory whose filesystem fills up, for real: a small tmpfs mounted by the test
//! (root is needed, and its absence fails the test), idem's own writes on it, then a file that
//! takes the rest of the space. The write that finds no space halts the store and the process
//! exits non-zero at once; once space is freed, the restart recovers from what is durable:
//! every answered key replays byte for byte, and the refused one is decided once on its retry.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// A tmpfs mounted on a temp dir for the test's life.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs failed (this test fills a real filesystem and needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes `path` until the filesystem has no space left; how many bytes it took.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).expect("create the filler");
    let chunk = vec![0x5a_u8; 64 * 1024];
    let mut written = 0;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    let _ = file.sync_all();
    written
}

#[tokio::test]
async fn a_full_disk_stops_idem_and_freeing_it_recovers_every_answered_key() {
    let fs = Tmpfs::mount("64m");
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = Receiver::start().await;
    let data: PathBuf = fs.path().join("data");
    let cfg = config_on("", &data, &receiver, "", "");
    let mut idem = Idem::start(dir.path(), &cfg);
    let (mut answered, refused) = send_until_refused(&idem.base, 20).await;
    assert!(refused.is_none(), "the disk has room yet");
    assert_eq!(answered.len(), 20);

    let filler = fs.path().join("filler");
    assert!(fill(&filler) > 0, "the filler took the space left");
    let (more, refused) = send_until_refused(&idem.base, 5_000).await;
    answered.extend(more);
    let (failed, answer) = refused.expect("a write found no space");
    if let Some(r) = answer {
        assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    }
    let status = idem.exited().await;
    assert!(
        !status.success() && status.code().is_some(),
        "the process exits by itself, non-zero: {status:?}; {}",
        idem.stderr()
    );

    std::fs::remove_file(&filler).expect("free the space");
    let idem = Idem::start_with(idem.config_path.clone(), &[]);
    let health = Client::new(&idem.base)
        .send("GET", "/healthz", Req::new(""))
        .await;
    assert_eq!(health.status, 200, "writes succeed again");
    assert_replays(&idem.base, &answered).await;
    let client = Client::new(&idem.base);
    let r = client.signal(failed.request()).await;
    assert_eq!(r.status, 201, "the refused request's retry is decided");
    let again = client.signal(failed.request()).await;
    assert!(again.replayed() && again.body == r.body, "and decided once");
}
