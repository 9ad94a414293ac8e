use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn open_and_closed_times_of_several_windows() {
    // (days, start, end, zone, instant, open?)
    let cases = [
        // Every day, working hours, UTC.
        ("", "09:00", "17:00", "UTC", "2026-11-24T08:59:59Z", false),
        ("", "09:00", "17:00", "UTC", "2026-11-24T09:00:00Z", true),
        ("", "09:00", "17:00", "UTC", "2026-11-24T16:59:59Z", true),
        ("", "09:00", "17:00", "UTC", "2026-11-24T17:00:00Z", false),
        // Weekends only (2026-11-24 is a Tuesday, 28 a Saturday).
        (
            "sat,sun",
            "00:00",
            "24:00",
            "UTC",
            "2026-11-24T12:00:00Z",
            false,
        ),
        (
            "sat,sun",
            "00:00",
            "24:00",
            "UTC",
            "2026-11-28T12:00:00Z",
            true,
        ),
        (
            "Saturday,Sunday",
            "00:00",
            "24:00",
            "UTC",
            "2026-11-29T23:59:00Z",
            true,
        ),
        // Overnight: Saturday 22:00 to Sunday 04:00 belongs to Saturday.
        (
            "sat",
            "22:00",
            "04:00",
            "UTC",
            "2026-11-28T21:59:00Z",
            false,
        ),
        ("sat", "22:00", "04:00", "UTC", "2026-11-28T23:00:00Z", true),
        ("sat", "22:00", "04:00", "UTC", "2026-11-29T03:59:00Z", true),
        (
            "sat",
            "22:00",
            "04:00",
            "UTC",
            "2026-11-29T04:00:00Z",
            false,
        ),
        // ... and Sunday 22:00 does not open it (Sunday is not allowed).
        (
            "sat",
            "22:00",
            "04:00",
            "UTC",
            "2026-11-29T23:00:00Z",
            false,
        ),
        // Start equal to end: the whole day.
        ("tue", "00:00", "00:00", "UTC", "2026-11-24T13:00:00Z", true),
        (
            "tue",
            "00:00",
            "00:00",
            "UTC",
            "2026-11-25T00:00:01Z",
            false,
        ),
        // In the window's zone: 02:00 in Berlin is 01:00 UTC in winter.
        (
            "",
            "02:00",
            "05:00",
            "Europe/Berlin",
            "2026-11-24T00:59:00Z",
            false,
        ),
        (
            "",
            "02:00",
            "05:00",
            "Europe/Berlin",
            "2026-11-24T01:00:00Z",
            true,
        ),
        (
            "",
            "02:00",
            "05:00",
            "Europe/Berlin",
            "2026-11-24T03:59:00Z",
            true,
        ),
        (
            "",
            "02:00",
            "05:00",
            "Europe/Berlin",
            "2026-11-24T04:00:00Z",
            false,
        ),
        // A day in the window's zone, not in UTC: Tuesday 00:30 in Tokyo
        // is Monday 15:30 UTC.
        (
            "tue",
            "00:00",
            "01:00",
            "Asia/Tokyo",
            "2026-11-23T15:30:00Z",
            true,
        ),
    ];
    for (days, start, end, tz, now, open) in cases {
        let w = Window::parse(days, start, end, tz).unwrap();
        assert_eq!(
            w.is_open(at(now)),
            open,
            "{days} {start}-{end} {tz} at {now}"
        );
        assert_eq!(w.hold(at(now)).is_none(), open);
    }
}

#[test]
fn the_next_opening_is_the_first_allowed_start_after_now() {
    let w = Window::parse("sat,sun", "02:00", "05:00", "Europe/Berlin").unwrap();
    // Tuesday: next is Saturday 02:00 Berlin = 01:00 UTC.
    assert_eq!(
        w.next_opening(at("2026-11-24T12:00:00Z")),
        Some(at("2026-11-28T01:00:00Z"))
    );
    // Saturday 03:00 Berlin (open now): the next one is Sunday's.
    assert_eq!(
        w.next_opening(at("2026-11-28T02:00:00Z")),
        Some(at("2026-11-29T01:00:00Z"))
    );
    let (why, until) = w.hold(at("2026-11-24T12:00:00Z")).unwrap();
    assert_eq!(until, Some(at("2026-11-28T01:00:00Z")));
    assert!(
        why.contains("sat,sun 02:00-05:00 Europe/Berlin")
            && why.contains("Sat 2026-11-28 02:00 CET"),
        "{why}"
    );
}

#[test]
fn a_daylight_saving_change_moves_the_opening_with_the_wall_clock() {
    // Berlin moves to summer time on 2026-03-29: 03:00-04:00 local is
    // 02:00-03:00 UTC before, 01:00-02:00 UTC after.
    let w = Window::parse("", "03:00", "04:00", "Europe/Berlin").unwrap();
    assert!(w.is_open(at("2026-03-28T02:30:00Z")), "winter: 03:30 CET");
    assert!(w.is_open(at("2026-03-30T01:30:00Z")), "summer: 03:30 CEST");
    assert!(!w.is_open(at("2026-03-30T02:30:00Z")), "summer: 04:30 CEST");
}

#[test]
fn bad_settings_say_what_is_wrong() {
    assert_eq!(
        Window::parse("mon,funday", "02:00", "05:00", "UTC").unwrap_err(),
        WindowError::Day("funday".into())
    );
    for bad in ["2am", "25:00", "02:60", "2:0", ""] {
        assert_eq!(
            Window::parse("", bad, "05:00", "UTC").unwrap_err(),
            WindowError::Time(bad.into()),
            "{bad}"
        );
    }
    assert_eq!(
        Window::parse("", "02:00", "05:00", "Mars/Olympus").unwrap_err(),
        WindowError::Zone("Mars/Olympus".into())
    );
    assert!(
        Window::parse("", "02:00", "05:00", "Mars/Olympus")
            .unwrap_err()
            .to_string()
            .contains("IANA")
    );
}

#[test]
fn no_allowed_day_never_opens() {
    let mut w = Window::parse("mon", "02:00", "05:00", "UTC").unwrap();
    w.days = [false; 7];
    assert_eq!(w.next_opening(at("2026-11-24T12:00:00Z")), None);
    assert!(
        w.hold(at("2026-11-24T12:00:00Z"))
            .unwrap()
            .0
            .contains("never")
    );
}
