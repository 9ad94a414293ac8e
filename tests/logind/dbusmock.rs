//! The same inhibitor against python-dbusmock's logind template, which
//! tracks Inhibit/ListInhibitors (closing the fd drops the entry) but has
//! no shutdown logic, no InhibitDelayMaxUSec and a Reboot that does nothing
//! until a test overrides it.

use std::time::Duration;

use maintd::inhibitor::{ShutdownEvent, ShutdownInhibitor};
use maintd::logind::LogindError;
use maintd_sim::dbus::PrivateBus;
use zbus::zvariant::Value;

use super::support::*;

async fn reboot_emits_prepare(mock: &DbusMock) {
    // The template's Reboot does nothing; make it behave like logind.
    mock.add_method(
        "Reboot",
        "b",
        "",
        "self.EmitSignal('org.freedesktop.login1.Manager', 'PrepareForShutdown', 'b', [True])",
    )
    .await;
}

#[tokio::test]
async fn lock_taken_and_listed() {
    let bus = PrivateBus::start().unwrap();
    let _mock = DbusMock::start(&bus, true).await;
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (_handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    let list = client(&bus).await.list_inhibitors().await.unwrap();
    assert_eq!(ours(&list, &token), 1, "{list:?}");
    assert!(list.iter().any(|i| i.who == "maintd" && i.mode == "delay"));
}

#[tokio::test]
async fn prepare_gives_budget_and_release_drops_lock() {
    let bus = PrivateBus::start().unwrap();
    let mock = DbusMock::start(&bus, true).await;
    mock.add_property("InhibitDelayMaxUSec", Value::U64(42_000_000))
        .await;
    reboot_emits_prepare(&mock).await;
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);

    let logind = client(&bus).await;
    logind.reboot().await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ShutdownEvent::Preparing {
            budget: Duration::from_secs(42),
            already_in_progress: false
        }
    );
    handle.release().await.unwrap();
    eventually("dbusmock drops the released lock", || async {
        count_ours(&logind, &token).await == 0
    })
    .await;
}

#[tokio::test]
async fn cancel_reacquires_lock() {
    let bus = PrivateBus::start().unwrap();
    let mock = DbusMock::start(&bus, true).await;
    mock.add_property("InhibitDelayMaxUSec", Value::U64(5_000_000))
        .await;
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);

    mock.emit_prepare_for_shutdown(true).await;
    event_matching(&mut events, |e| {
        matches!(e, ShutdownEvent::Preparing { .. })
    })
    .await;
    handle.release().await.unwrap();
    mock.emit_prepare_for_shutdown(false).await;
    assert_eq!(next_event(&mut events).await, ShutdownEvent::Cancelled);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    let logind = client(&bus).await;
    eventually("exactly one lock of ours after cancel", || async {
        count_ours(&logind, &token).await == 1
    })
    .await;
}

#[tokio::test]
async fn restarted_without_state_gets_one_new_lock() {
    let bus = PrivateBus::start().unwrap();
    let mock = DbusMock::start(&bus, true).await;
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (_handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);

    mock.kill().await;
    assert!(matches!(
        next_event(&mut events).await,
        ShutdownEvent::LockLost { .. }
    ));
    let _mock2 = DbusMock::start(&bus, true).await;
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    assert_eq!(count_ours(&client(&bus).await, &token).await, 1);
}

#[tokio::test]
async fn missing_budget_property_is_reported_not_a_panic() {
    let bus = PrivateBus::start().unwrap();
    // The template has no InhibitDelayMaxUSec unless a test adds it.
    let mock = DbusMock::start(&bus, true).await;
    let logind = client(&bus).await;
    let err = logind.inhibit_delay_max().await.unwrap_err();
    assert!(
        matches!(
            err,
            LogindError::MissingProperty {
                property: "InhibitDelayMaxUSec",
                ..
            }
        ),
        "{err:?}"
    );

    let cfg = config(&bus);
    let fallback = cfg.fallback_budget;
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    mock.emit_prepare_for_shutdown(true).await;
    assert_eq!(
        next_event(&mut events).await,
        ShutdownEvent::Preparing {
            budget: fallback,
            already_in_progress: false
        }
    );
    let status = handle.status();
    assert!(status.held);
    assert!(
        status
            .last_error
            .unwrap_or_default()
            .contains("InhibitDelayMaxUSec")
    );
}

#[tokio::test]
async fn unexpected_reply_types_are_reported_not_a_panic() {
    let bus = PrivateBus::start().unwrap();
    // A bare mock object whose methods and properties have the wrong types.
    let mock = DbusMock::start(&bus, false).await;
    mock.add_method("Inhibit", "ssss", "s", "ret = 'not an fd'")
        .await;
    mock.add_method("ListInhibitors", "", "as", "ret = ['not', 'rows']")
        .await;
    mock.add_property("InhibitDelayMaxUSec", Value::from("soon"))
        .await;
    mock.add_property("PreparingForShutdown", Value::U32(7))
        .await;

    let logind = client(&bus).await;
    for err in [
        logind
            .inhibit("shutdown", "maintd", "t", "delay")
            .await
            .map(|_| ())
            .unwrap_err(),
        logind.list_inhibitors().await.map(|_| ()).unwrap_err(),
        logind.inhibit_delay_max().await.map(|_| ()).unwrap_err(),
        logind
            .preparing_for_shutdown()
            .await
            .map(|_| ())
            .unwrap_err(),
    ] {
        assert!(
            matches!(err, LogindError::UnexpectedReply { .. }),
            "{err:?}"
        );
    }

    let (handle, mut events) = ShutdownInhibitor::start(config(&bus));
    match next_event(&mut events).await {
        ShutdownEvent::LockLost { reason } => assert!(reason.contains("Inhibit"), "{reason}"),
        other => panic!("expected LockLost, got {other:?}"),
    }
    let status = handle.status();
    assert!(!status.held);
    assert!(status.last_error.is_some());
    // The task is alive and still answers.
    handle.release().await.unwrap();
}

#[tokio::test]
async fn malformed_signal_is_skipped_not_a_panic() {
    let bus = PrivateBus::start().unwrap();
    let mock = DbusMock::start(&bus, true).await;
    mock.add_property("InhibitDelayMaxUSec", Value::U64(7_000_000))
        .await;
    let (handle, mut events) = ShutdownInhibitor::start(config(&bus));
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);

    mock.emit_prepare_for_shutdown_raw("s", Value::from("yes"))
        .await;
    mock.emit_prepare_for_shutdown(true).await;
    // The malformed signal produced nothing; the good one right after it did.
    assert_eq!(
        next_event(&mut events).await,
        ShutdownEvent::Preparing {
            budget: Duration::from_secs(7),
            already_in_progress: false
        }
    );
    assert!(handle.status().held);
}

/// A logind that cannot list its locks (ListInhibitors fails) still gives
/// the agent its lock; later, the agent keeps the fd it has rather than
/// taking a second lock it cannot see, and says the lock is in doubt.
#[tokio::test]
async fn a_failing_lock_list_neither_stops_the_lock_nor_doubles_it() {
    let bus = PrivateBus::start().unwrap();
    let mock = DbusMock::start(&bus, true).await;
    mock.add_property("InhibitDelayMaxUSec", Value::U64(5_000_000))
        .await;
    mock.add_method(
        "ListInhibitors",
        "",
        "a(ssssuu)",
        "raise dbus.exceptions.DBusException('the inhibitor table is busy', name='org.freedesktop.DBus.Error.Failed')",
    )
    .await;
    let (handle, mut events) = ShutdownInhibitor::start(config(&bus));
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    assert_eq!(mock.calls("Inhibit").await, 1);

    // A shutdown that is called off makes the agent look at its lock again.
    mock.emit_prepare_for_shutdown(true).await;
    assert!(matches!(
        next_event(&mut events).await,
        ShutdownEvent::Preparing { .. }
    ));
    mock.emit_prepare_for_shutdown(false).await;
    assert_eq!(next_event(&mut events).await, ShutdownEvent::Cancelled);
    match next_event(&mut events).await {
        ShutdownEvent::LockLost { reason } => {
            assert!(reason.contains("inhibitor table is busy"), "{reason}")
        }
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert_eq!(mock.calls("Inhibit").await, 1, "no second lock was taken");
    handle.release().await.unwrap();
}
