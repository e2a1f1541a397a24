//! The address `serve --http` listens on, in the forms people type: `8765`, `localhost:8765`,
//! `127.0.0.1:8765`, `[::1]:8765`.

use std::net::{Ipv4Addr, SocketAddr};

/// An address `serve --http` cannot listen on, with the forms it takes.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not an address to listen on: give PORT (on 127.0.0.1), localhost:PORT, or ADDR:PORT with an IP \
     address (e.g. 8765, localhost:8765, 0.0.0.0:8765, [::1]:8765)"
)]
pub struct NotAnAddress(String);

/// Parses `PORT` and `localhost:PORT` as loopback (127.0.0.1), and `ADDR:PORT` with an IPv4 or IPv6 address.
pub fn listen_address(given: &str) -> Result<SocketAddr, NotAnAddress> {
    let not_an_address = || NotAnAddress(given.to_string());
    let loopback_port = match given.split_once(':') {
        None => Some(given),
        Some((host, port)) if host.eq_ignore_ascii_case("localhost") => Some(port),
        Some(_) => None,
    };
    match loopback_port {
        Some(port) if port.bytes().all(|b| b.is_ascii_digit()) => {
            port.parse().map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port))).map_err(|_| not_an_address())
        }
        Some(_) => Err(not_an_address()),
        None => given.parse().map_err(|_| not_an_address()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_or_after_localhost_listens_on_loopback() {
        for given in ["8765", "localhost:8765", "LOCALHOST:8765", "127.0.0.1:8765"] {
            assert_eq!(listen_address(given), Ok("127.0.0.1:8765".parse().unwrap()), "{given}");
        }
        assert_eq!(listen_address("0"), Ok("127.0.0.1:0".parse().unwrap()));
        assert_eq!(listen_address("0.0.0.0:80"), Ok("0.0.0.0:80".parse().unwrap()));
        assert_eq!(listen_address("[::1]:8765"), Ok("[::1]:8765".parse().unwrap()));
    }

    #[test]
    fn anything_else_is_refused_with_the_forms_that_work() {
        for given in ["", "65536", "+80", "localhost", "localhost:", "example.com:80", ":8765", "::1:8765", "8765x"] {
            let error = listen_address(given).expect_err(given).to_string();
            assert!(error.starts_with(&format!("'{given}' is not an address to listen on: give PORT")), "{error}");
            assert!(error.contains("localhost:PORT") && error.contains("ADDR:PORT"), "{error}");
        }
    }
}
