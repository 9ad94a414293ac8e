//! The node helper's protocol, both ends: a line the helper reads from the
//! agent (a request, or a command during a hold session) and a line the
//! agent reads from the helper (a reply to a file operation, or a session
//! message), each read through the same bounded line reader. Checks: a line
//! is at most the limit; what decodes re-encodes to the same value
//! (parse(render(x)) == x); what does not decode gets an error in words.
#![no_main]

use libfuzzer_sys::fuzz_target;
use maintd::drain::static_pods::{Manifest, RestoreReport, StashReport};
use maintd::fuzzing;
use maintd::node_helper::{Request, SessionCommand, SessionMessage};

/// The request limit of the helper (64 KiB), small enough to hit here.
const LIMIT: u64 = 64 * 1024;

fn round_trip<T>(v: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let line = serde_json::to_string(v).expect("a message serializes");
    assert!(!line.contains('\n'), "a message is one line");
    let back: T = serde_json::from_str(&line).expect("a message reads back");
    assert_eq!(&back, v, "parse(render(x)) == x");
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let line = match rt.block_on(fuzzing::node_helper_read_line(data, LIMIT)) {
        Ok(Some(line)) => line,
        Ok(None) => return,
        Err(e) => {
            assert!(!e.trim().is_empty());
            return;
        }
    };
    assert!(line.len() as u64 <= LIMIT + 1 && line.ends_with('\n'));
    match fuzzing::node_helper_request(&line) {
        Ok(r) => round_trip::<Request>(&r),
        Err(e) => assert!(!e.trim().is_empty()),
    }
    match fuzzing::node_helper_session_command(&line) {
        Ok(c) => round_trip::<SessionCommand>(&c),
        Err(e) => assert!(!e.trim().is_empty()),
    }
    match fuzzing::node_helper_session_message(&line) {
        Ok(m) => {
            // Times and numbers as the helper writes them read back alike.
            let once = serde_json::to_value(&m).unwrap();
            let back: SessionMessage = serde_json::from_value(once.clone()).unwrap();
            assert_eq!(serde_json::to_value(&back).unwrap(), once);
        }
        Err(e) => assert!(!e.trim().is_empty()),
    }
    fn reply<T>(line: &str)
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        match fuzzing::node_helper_reply::<T>(line) {
            Ok(Ok(v)) => round_trip(&v),
            Ok(Err(e)) => assert!(
                !e.trim().is_empty(),
                "the helper's failure is said in words"
            ),
            Err(e) => assert!(!e.trim().is_empty(), "an unreadable reply says why"),
        }
    }
    reply::<Vec<Manifest>>(&line);
    reply::<Vec<String>>(&line);
    reply::<StashReport>(&line);
    reply::<RestoreReport>(&line);
});
