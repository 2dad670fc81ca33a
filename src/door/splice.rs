//! A tunnel's bytes moved between two sockets without leaving the
//! kernel: each way, `splice` from the socket into a pipe and from the
//! pipe into the other socket, waiting on each socket's readiness as
//! tokio reports it. What a copying relay would read into the bridge and
//! write out again (two more copies of a large download) never reaches
//! user space.

use std::io;
use std::os::fd::OwnedFd;

use nix::fcntl::{FcntlArg, SpliceFFlags, fcntl, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// What a pipe holds at once: a download moves in few calls.
const PIPE_BYTES: i32 = 1 << 20;

/// Move bytes both ways between `a` and `b` until both ends are done (a
/// side that ends has the other's writing shut, as a copy would).
pub async fn both_ways(a: &TcpStream, b: &TcpStream) -> io::Result<()> {
    let (there, back) = tokio::join!(one_way(a, b), one_way(b, a));
    there.and(back)
}

/// Move what `from` sends to `to` until `from` ends.
async fn one_way(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
    let (pipe_out, pipe_in) = nix::unistd::pipe()?;
    // A larger pipe where the system lets it; the default works too.
    let _ = fcntl(&pipe_in, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        let taken = from
            .async_io(Interest::READABLE, || {
                splice(from, None, &pipe_in, None, PIPE_BYTES as usize, flags)
                    .map_err(io::Error::from)
            })
            .await?;
        if taken == 0 {
            // `from` is done: `to` is told, as a copy's shutdown would.
            let _ = nix::sys::socket::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(to),
                nix::sys::socket::Shutdown::Write,
            );
            return Ok(());
        }
        drain(&pipe_out, to, taken, flags).await?;
    }
}

/// Move the `left` bytes the pipe holds into `to`.
async fn drain(
    pipe: &OwnedFd,
    to: &TcpStream,
    mut left: usize,
    flags: SpliceFFlags,
) -> io::Result<()> {
    while left > 0 {
        let moved = to
            .async_io(Interest::WRITABLE, || {
                splice(pipe, None, to, None, left, flags).map_err(io::Error::from)
            })
            .await?;
        if moved == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the other side took nothing",
            ));
        }
        left -= moved;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    /// A connected pair of sockets: (ours, theirs).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let (ours, theirs) = tokio::join!(TcpStream::connect(at), listener.accept());
        (ours.unwrap(), theirs.unwrap().0)
    }

    #[tokio::test]
    async fn every_byte_passes_both_ways_and_an_end_is_passed_on() {
        let (mut client, client_side) = pair().await;
        let (server_side, mut server) = pair().await;
        let tunnel = tokio::spawn(async move { both_ways(&client_side, &server_side).await });
        let sent: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let upload = sent.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&upload).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "the bytes changed on the way");
        server.write_all(b"answer").await.unwrap();
        server.shutdown().await.unwrap();
        assert_eq!(writer.await.unwrap(), b"answer");
        tunnel.await.unwrap().unwrap();
    }
}
