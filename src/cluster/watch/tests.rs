use super::*;
use serde_json::json;
use std::sync::{Arc, Mutex};

/// What the scripted cluster answers a list with.
type ListAnswer = Box<dyn Fn(usize, &ListParams) -> Result<Value, kube::Error> + Send + Sync>;
/// What it answers the n-th watch with.
type WatchAnswer = Box<
    dyn Fn(usize) -> Result<Vec<Result<WatchEvent<Value>, kube::Error>>, kube::Error> + Send + Sync,
>;

struct Script {
    list: ListAnswer,
    watch: WatchAnswer,
    lists: Arc<Mutex<Vec<Instant>>>,
    watches: Arc<Mutex<usize>>,
}

impl Source for Script {
    async fn list(&self, _: &str, params: ListParams) -> Result<Value, kube::Error> {
        let n = {
            let mut lists = self.lists.lock().unwrap();
            lists.push(Instant::now());
            lists.len() - 1
        };
        (self.list)(n, &params)
    }

    async fn watch(&self, _: &str, _: WatchParams, _: String) -> Result<EventStream, kube::Error> {
        let n = {
            let mut watches = self.watches.lock().unwrap();
            *watches += 1;
            *watches - 1
        };
        let events = (self.watch)(n)?;
        // A watch that stays open after its events, as the server's does.
        Ok(futures_util::stream::iter(events)
            .chain(futures_util::stream::pending())
            .boxed())
    }
}

fn api_error(code: u16) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(&format!("answered {code}"), "Failure")
            .with_code(code)
            .boxed(),
    )
}

fn connection_refused() -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
}

fn list_of(items: Vec<Value>) -> Value {
    json!({"kind": "List", "metadata": {"resourceVersion": "10"}, "items": items})
}

/// Only what these tests read of an object.
#[derive(Debug, serde::Deserialize)]
struct Thing {
    metadata: Meta,
    #[serde(default)]
    #[allow(dead_code)]
    spec: Spec,
}

#[derive(Debug, serde::Deserialize)]
struct Meta {
    name: String,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Spec {
    #[serde(default)]
    #[allow(dead_code)]
    size: u32,
}

fn thing(name: &str) -> Value {
    json!({"metadata": {"name": name, "resourceVersion": "5"}, "spec": {"size": 1}})
}

/// Scaled down, so a test sees many steps of the backoff in a second.
fn fast() -> Settings {
    Settings {
        backoff: Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(160),
            jitter: 1.0,
            reset_after: Duration::from_secs(3600),
        },
        page: 2,
        watch_timeout: 290,
        forbidden_retry: Duration::from_millis(200),
    }
}

/// What the sink has seen: the names held, and how many lists completed.
#[derive(Clone, Default)]
struct Held(Arc<Mutex<(Relisted<()>, usize)>>);

impl Held {
    fn sink(&self) -> impl Sink<Thing> {
        let held = self.0.clone();
        sink(move |event: Event<Thing>| {
            let mut held = held.lock().unwrap();
            held.1 += usize::from(matches!(event, Event::InitDone));
            held.0.take(event, |t| Some((t.metadata.name.clone(), ())));
        })
    }

    fn names(&self) -> Vec<String> {
        self.0.lock().unwrap().0.held.keys().cloned().collect()
    }

    fn relists(&self) -> usize {
        self.0.lock().unwrap().1
    }
}

fn kind() -> Kind {
    Kind::new("things", "example.com", "v1", "things")
}

/// Watches `kind()` of `source` at the fast settings into `held`.
fn watch(source: Script, held: &Held) -> (Watched, tokio::task::JoinHandle<()>) {
    start(source, kind(), fast(), CacheMetrics::default(), held.sink())
}

fn script(list: ListAnswer, watch: WatchAnswer) -> (Script, Arc<Mutex<Vec<Instant>>>) {
    let lists = Arc::new(Mutex::new(Vec::new()));
    let script = Script {
        list,
        watch,
        lists: lists.clone(),
        watches: Arc::default(),
    };
    (script, lists)
}

/// The first watch is ended by a 410 Gone (the cache relists); later ones
/// stay open quietly.
fn gone_first() -> WatchAnswer {
    Box::new(|n| match n {
        0 => Ok(vec![Ok(WatchEvent::Error(
            kube::core::Status::failure("too old", "Expired")
                .with_code(410)
                .boxed(),
        ))]),
        _ => Ok(Vec::new()),
    })
}

fn quiet_watch() -> WatchAnswer {
    Box::new(|_| Ok(Vec::new()))
}

/// Polls `done` every 10 ms, for at most 5 s.
pub(crate) async fn wait_for(what: &str, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn pages_are_one_list_and_the_first_list_syncs() {
    let (source, lists) = script(
        Box::new(|_, params| {
            Ok(match params.continue_token.as_deref() {
                None => json!({"metadata": {"continue": "p2"}, "items": [thing("a"), thing("b")]}),
                Some("p2") => list_of(vec![thing("c")]),
                Some(other) => panic!("unknown token {other}"),
            })
        }),
        quiet_watch(),
    );
    let held = Held::default();
    let (watched, task) = watch(source, &held);
    assert!(watched.synced().await);
    assert_eq!(held.names(), ["a", "b", "c"]);
    assert_eq!(lists.lock().unwrap().len(), 2, "two pages, one list");
    assert_eq!(watched.status().state, State::Watching);
    task.abort();
}

#[tokio::test]
async fn a_failing_list_backs_off_up_to_the_maximum_and_keeps_the_server_waiting() {
    let (source, lists) = script(Box::new(|_, _| Err(api_error(500))), quiet_watch());
    let metrics = CacheMetrics::default();
    let (watched, task) = start(
        source,
        kind(),
        fast(),
        metrics.clone(),
        Held::default().sink(),
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    task.abort();
    let lists = lists.lock().unwrap().clone();
    // 10, 20, 40, 80 ms steps (each up to doubled by jitter, capped at
    // 160 ms), then 160 ms at most: over 1.5 s at least 10 waits of 80 ms
    // or more would be needed for more than 14 lists.
    assert!(lists.len() >= 3, "retried: {} lists", lists.len());
    assert!(
        lists.len() <= 14,
        "backed off: {} lists in 1.5 s",
        lists.len()
    );
    let gaps: Vec<Duration> = lists.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(10)),
        "{gaps:?}"
    );
    assert!(
        gaps[gaps.len() - 1] >= Duration::from_millis(80),
        "the waits grew: {gaps:?}"
    );
    assert_eq!(metrics.failures("things"), lists.len() as u64);
    let status = watched.status();
    assert!(!status.synced, "a 500 is not a reason to be ready");
    assert!(
        matches!(status.state, State::Failing(ref e) if e.contains("500")),
        "{status:?}"
    );
    assert!(status.why_not_synced().unwrap().contains("retrying: 500"));
}

#[test]
fn the_default_backoff_is_client_go_s_and_stays_within_30_s() {
    let mut delay = Delay::new(Backoff::default());
    let waits: Vec<Duration> = (0..12).map(|_| delay.next()).collect();
    assert!(waits[0] >= Duration::from_millis(800) && waits[0] <= Duration::from_millis(1600));
    assert!(waits.iter().all(|w| *w <= Duration::from_secs(30)));
    assert!(
        waits[8..].iter().all(|w| *w == Duration::from_secs(30)),
        "{waits:?}"
    );
    // 60 s of failures are at most 7 lists.
    let mut delay = Delay::new(Backoff {
        jitter: 0.0,
        ..Backoff::default()
    });
    let mut at = Duration::ZERO;
    let mut lists = 1;
    loop {
        at += delay.next();
        if at > Duration::from_secs(60) {
            break;
        }
        lists += 1;
    }
    assert_eq!(lists, 7);
    delay.reset();
    assert_eq!(delay.next(), Duration::from_millis(800));
}

#[tokio::test]
async fn an_outage_at_start_is_waited_out_and_then_the_cache_syncs() {
    let (source, _) = script(
        Box::new(|n, _| {
            if n < 3 {
                Err(connection_refused())
            } else {
                Ok(list_of(vec![thing("a")]))
            }
        }),
        quiet_watch(),
    );
    let held = Held::default();
    let (watched, task) = watch(source, &held);
    assert!(watched.synced().await);
    assert_eq!(held.names(), ["a"]);
    task.abort();
}

#[tokio::test]
async fn not_served_is_synced_and_empty_and_asked_again() {
    // Served at first, then the CRD goes away, then it comes back.
    let (source, lists) = script(
        Box::new(|n, _| match n {
            0 => Ok(list_of(vec![thing("a")])),
            1 | 2 => Err(api_error(404)),
            _ => Ok(list_of(vec![thing("b")])),
        }),
        gone_first(),
    );
    let held = Held::default();
    let (watched, task) = watch(source, &held);
    wait_for("the 404", || watched.status().state == State::NotServed).await;
    assert!(watched.status().synced);
    assert!(!watched.holds_list(), "synced, but nothing served to hold");
    assert!(held.names().is_empty(), "not served: nothing held");
    wait_for("the kind to come back", || held.names() == ["b"]).await;
    assert!(lists.lock().unwrap().len() >= 4);
    task.abort();
}

#[tokio::test]
async fn a_never_served_kind_does_not_hold_readiness() {
    let (source, _) = script(Box::new(|_, _| Err(api_error(404))), quiet_watch());
    let (watched, task) = watch(source, &Held::default());
    assert!(watched.synced().await);
    assert_eq!(watched.status().state, State::NotServed);
    task.abort();
}

#[tokio::test]
async fn forbidden_waits_unless_the_kind_can_be_done_without_and_is_asked_again() {
    let answers = || -> ListAnswer {
        Box::new(|n, _| {
            if n < 2 {
                Err(api_error(403))
            } else {
                Ok(list_of(vec![thing("a")]))
            }
        })
    };
    // A kind the server needs: not synced while refused.
    let (source, lists) = script(answers(), quiet_watch());
    let held = Held::default();
    let (watched, task) = watch(source, &held);
    wait_for("the 403", || {
        matches!(watched.status().state, State::Forbidden(_))
    })
    .await;
    assert!(!watched.status().synced);
    assert!(watched
        .status()
        .why_not_synced()
        .unwrap()
        .starts_with("forbidden: 403"));
    // Granted later: picked up on the slow timer.
    assert!(
        !watched.holds_list(),
        "refused: not a list the server holds"
    );
    assert!(watched.synced().await);
    assert!(watched.holds_list());
    assert_eq!(held.names(), ["a"]);
    assert_eq!(lists.lock().unwrap().len(), 3);
    task.abort();

    // A kind the server does without: synced (empty) at the first 403.
    let (source, _) = script(answers(), quiet_watch());
    let held = Held::default();
    let (watched, task) = start(
        source,
        kind().forbidden_is_empty("list on things"),
        fast(),
        CacheMetrics::default(),
        held.sink(),
    );
    wait_for("the 403", || {
        matches!(watched.status().state, State::Forbidden(_))
    })
    .await;
    assert!(watched.status().synced);
    assert!(held.names().is_empty());
    wait_for("the grant", || held.names() == ["a"]).await;
    task.abort();
}

#[tokio::test]
async fn an_object_that_does_not_read_is_skipped_and_counted_not_a_stall() {
    let bad =
        json!({"metadata": {"name": "bad", "resourceVersion": "6"}, "spec": {"size": "huge"}});
    let (source, _) = script(
        Box::new(move |_, _| Ok(list_of(vec![thing("a"), bad.clone(), thing("c")]))),
        Box::new(|n| {
            let bad = json!({"metadata": {"name": "worse", "resourceVersion": "11"}, "spec": {"size": -1}});
            Ok(match n {
                0 => vec![
                    Ok(WatchEvent::Added(bad)),
                    Ok(WatchEvent::Added(thing("d"))),
                    Ok(WatchEvent::Deleted(thing("a"))),
                ],
                _ => Vec::new(),
            })
        }),
    );
    let held = Held::default();
    let metrics = CacheMetrics::default();
    let (watched, task) = start(source, kind(), fast(), metrics.clone(), held.sink());
    assert!(
        watched.synced().await,
        "one bad object does not keep the cache from syncing"
    );
    wait_for("the watch's events", || held.names() == ["c", "d"]).await;
    assert_eq!(metrics.skipped("things"), 2);
    assert_eq!(held.relists(), 1);
    task.abort();
}

#[tokio::test]
async fn a_failing_relist_keeps_what_the_cache_holds() {
    let (source, _) = script(
        Box::new(|n, _| {
            if n == 0 {
                Ok(list_of(vec![thing("a")]))
            } else {
                Err(api_error(503))
            }
        }),
        gone_first(),
    );
    let held = Held::default();
    let (watched, task) = watch(source, &held);
    wait_for("the failing relist", || {
        matches!(watched.status().state, State::Failing(_))
    })
    .await;
    let status = watched.status();
    assert!(status.synced, "synced once, it stays so");
    assert_eq!(held.names(), ["a"], "kept through failed relists");
    task.abort();
}

#[tokio::test]
async fn a_watch_that_breaks_at_once_is_not_hammered() {
    let watches = Arc::new(Mutex::new(0usize));
    let (mut source, _) = script(
        Box::new(|_, _| Ok(list_of(vec![thing("a")]))),
        Box::new(|_| Ok(vec![Err(connection_refused())])),
    );
    source.watches = watches.clone();
    let (watched, task) = watch(source, &Held::default());
    assert!(watched.synced().await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    task.abort();
    let watches = *watches.lock().unwrap();
    // As for a failing list: the backoff's steps, not a tight loop.
    assert!((2..=14).contains(&watches), "{watches} watches in 1.5 s");
}
