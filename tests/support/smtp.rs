//! A real SMTP server for the alert tests, in the test process: it speaks the protocol over TCP
//! on a loopback port it binds itself (no port picked first and bound later, so no race), keeps
//! every mail it accepts, and can be told to be unavailable (every session answered `421`, as a
//! server shutting down does) or to refuse recipients for good (`550`).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct State {
    mails: Mutex<Vec<String>>,
    refused: Mutex<Vec<String>>,
    down: AtomicBool,
}

pub struct Smtp {
    pub port: u16,
    state: Arc<State>,
}

impl Smtp {
    /// Listening now, answering every session.
    pub fn start() -> Smtp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the SMTP server");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let _ = session(stream, &state);
                });
            }
        });
        Smtp { port, state }
    }

    /// Listening, but answering every session `421` until [`Smtp::up`].
    pub fn start_down() -> Smtp {
        let s = Smtp::start();
        s.state.down.store(true, Ordering::SeqCst);
        s
    }

    pub fn up(&self) {
        self.state.down.store(false, Ordering::SeqCst);
    }

    /// Refuse mail to `address` for good (`550` to its RCPT).
    pub fn refuse(&self, address: &str) {
        if let Ok(mut r) = self.state.refused.lock() {
            r.push(address.to_ascii_lowercase());
        }
    }

    /// The mails accepted so far, as received (headers and body, lines ending in `\n`).
    pub fn mails(&self) -> Vec<String> {
        self.state
            .mails
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }
}

fn session(stream: TcpStream, state: &State) -> std::io::Result<()> {
    let mut out = stream.try_clone()?;
    let mut input = BufReader::new(stream);
    if state.down.load(Ordering::SeqCst) {
        out.write_all(b"421 127.0.0.1 Service not available, closing channel\r\n")?;
        return Ok(());
    }
    out.write_all(b"220 127.0.0.1 ESMTP workdo-test\r\n")?;
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let upper = line.trim_end().to_ascii_uppercase();
        if upper.starts_with("EHLO") {
            out.write_all(b"250-127.0.0.1\r\n250 8BITMIME\r\n")?;
        } else if upper.starts_with("HELO") || upper.starts_with("MAIL FROM") {
            out.write_all(b"250 OK\r\n")?;
        } else if upper.starts_with("RCPT TO") {
            let refused = state.refused.lock().map(|r| r.clone()).unwrap_or_default();
            if refused
                .iter()
                .any(|a| upper.to_ascii_lowercase().contains(a))
            {
                out.write_all(b"550 5.1.1 No such mailbox here\r\n")?;
            } else {
                out.write_all(b"250 OK\r\n")?;
            }
        } else if upper == "DATA" {
            out.write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")?;
            let mut mail = String::new();
            loop {
                line.clear();
                if input.read_line(&mut line)? == 0 {
                    return Ok(());
                }
                let text = line.trim_end_matches(['\r', '\n']);
                if text == "." {
                    break;
                }
                // Dot-stuffing undone, lines as a mailbox file keeps them.
                mail.push_str(text.strip_prefix('.').unwrap_or(text));
                mail.push('\n');
            }
            if let Ok(mut m) = state.mails.lock() {
                m.push(mail);
            }
            out.write_all(b"250 OK: queued\r\n")?;
        } else if upper == "RSET" || upper == "NOOP" {
            out.write_all(b"250 OK\r\n")?;
        } else if upper == "QUIT" {
            out.write_all(b"221 Bye\r\n")?;
            return Ok(());
        } else {
            out.write_all(b"502 Command not implemented\r\n")?;
        }
    }
}
