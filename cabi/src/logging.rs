//! Our Rust code's log events (`tracing`: discovery's retries and warnings, the launcher's
//! per-pod progress and failures) on PRRTE's own verbose output: the `ras` framework's stream
//! for discovery, the `plm` framework's for the launcher, shown with `--prtemca
//! ras_base_verbose N` / `plm_base_verbose N` like PRRTE's own components' messages.
//!
//! Levels: a warning or error is verbose level 1 (with `warning:`), info 2, debug 5, trace 9.
//! Events of other crates (kube, hyper) are passed on only as warnings and errors. The verbosity
//! is read once when a component installs the route (on the main thread); events below it cost
//! no formatting. PMIx's output functions are not thread-safe, so an event from our threads is
//! posted to PRRTE's event thread ([`crate::mainloop`]) and printed there, in order.
use crate::shim::{self, Framework};
use crate::{ffi, mainloop};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// The verbosity of each framework's stream as last read (-1: not known yet, nothing passes).
static RAS_VERBOSITY: AtomicI32 = AtomicI32::new(-1);
static PLM_VERBOSITY: AtomicI32 = AtomicI32::new(-1);
static INSTALL: Once = Once::new();

fn verbosity(fw: Framework) -> &'static AtomicI32 {
    match fw {
        Framework::Ras => &RAS_VERBOSITY,
        Framework::Plm => &PLM_VERBOSITY,
    }
}

/// Routes log events to `fw`'s verbose stream from now on (main thread, once the framework is
/// open: at RAS allocate, at PLM init). Installs the process-wide subscriber the first time.
pub(crate) fn route(fw: Framework) {
    // SAFETY: main thread, the framework is open (our module runs), so its output stream id is
    // set; PMIx only reads its table of streams here.
    let level = unsafe {
        let output = match fw {
            Framework::Ras => ffi::prte_ras_base_framework.framework_output,
            Framework::Plm => ffi::prte_plm_base_framework.framework_output,
        };
        ffi::pmix_output_get_verbosity(output)
    };
    set_verbosity(fw, level);
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(ToVerbose {
            emit: |fw, level, msg| mainloop::post(move || shim::verbose(fw, level, &msg)),
        });
        // Fails only if a subscriber is already installed in this process (nothing of ours
        // does that in prte); then events keep going there.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Sets the verbosity events for `fw` are filtered against.
pub(crate) fn set_verbosity(fw: Framework, level: i32) {
    verbosity(fw).store(level, Ordering::Relaxed);
}

/// The verbose level an event of `level` is printed at.
pub(crate) fn verbose_level(level: Level) -> i32 {
    match level {
        Level::ERROR | Level::WARN => 1,
        Level::INFO => 2,
        Level::DEBUG => 5,
        Level::TRACE => 9,
    }
}

/// The framework an event belongs to: by the thread it happens on (discovery's, the launcher's),
/// else by the module that logged it.
pub(crate) fn framework_of(meta: &Metadata<'_>, thread: Option<&str>) -> Option<Framework> {
    match thread {
        Some(t) if t.starts_with("prrte-k8s-ras") => return Some(Framework::Ras),
        Some(t) if t.starts_with("prrte-k8s-launch") => return Some(Framework::Plm),
        _ => {}
    }
    let target = meta.target();
    if target.starts_with("prrte_k8s::discovery") {
        Some(Framework::Ras)
    } else if target.starts_with("prrte_k8s::launch") || target.starts_with("prrte_k8s::protocol") {
        Some(Framework::Plm)
    } else {
        None
    }
}

/// Whether an event passes: routed, of our crate or a warning/error, and within the verbosity.
fn wanted(meta: &Metadata<'_>) -> Option<(Framework, i32)> {
    let thread = std::thread::current();
    let fw = framework_of(meta, thread.name())?;
    let ours = meta.target().starts_with("prrte_k8s");
    if !ours && *meta.level() > Level::WARN {
        return None;
    }
    let level = verbose_level(*meta.level());
    (verbosity(fw).load(Ordering::Relaxed) >= level).then_some((fw, level))
}

/// The layer that formats wanted events and hands them to `emit`.
pub(crate) struct ToVerbose<E: Fn(Framework, i32, String) + Send + Sync + 'static> {
    pub(crate) emit: E,
}

impl<S: Subscriber, E: Fn(Framework, i32, String) + Send + Sync + 'static> Layer<S>
    for ToVerbose<E>
{
    fn register_callsite(
        &self,
        _meta: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Decided per event: the verbosity is known only once a component routes.
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, meta: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        wanted(meta).is_some()
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let Some((fw, level)) = wanted(event.metadata()) else {
            return;
        };
        (self.emit)(fw, level, format_event(fw, event));
    }
}

/// `ras:k8s: warning: MESSAGE (field=value, ...)`.
pub(crate) fn format_event(fw: Framework, event: &Event<'_>) -> String {
    let mut v = Fields::default();
    event.record(&mut v);
    let mut out = format!("{}:k8s: ", fw.name());
    match *event.metadata().level() {
        Level::ERROR => out.push_str("error: "),
        Level::WARN => out.push_str("warning: "),
        _ => {}
    }
    out.push_str(&v.message);
    if !v.fields.is_empty() {
        let _ = write!(out, " ({})", v.fields.join(", "));
    }
    out
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields.push(format!("{}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields.push(format!("{}={value:?}", field.name()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<(Framework, i32, String)>>>;

    fn capture() -> (Seen, impl Subscriber + Send + Sync) {
        let seen: Seen = Arc::default();
        let s = seen.clone();
        let sub = tracing_subscriber::registry().with(ToVerbose {
            emit: move |fw, level, msg| s.lock().unwrap().push((fw, level, msg)),
        });
        (seen, sub)
    }

    fn on_thread(name: &str, dispatch: &tracing::Dispatch, f: impl FnOnce() + Send + 'static) {
        let d = dispatch.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || tracing::dispatcher::with_default(&d, f))
            .unwrap()
            .join()
            .unwrap();
    }

    /// Both frameworks' verbosities are process-wide: the tests that set them run as one.
    #[test]
    fn events_reach_their_framework_within_its_verbosity() {
        let (seen, sub) = capture();
        set_verbosity(Framework::Ras, 1);
        set_verbosity(Framework::Plm, 2);
        let dispatch = tracing::Dispatch::new(sub);
        // On discovery's thread: warnings at ras verbosity 1, info needs 2.
        on_thread("prrte-k8s-ras", &dispatch, || {
            tracing::warn!(pod = "w-1", "cannot list pods yet; retrying");
            tracing::info!("pods ready: 1 of 2");
            tracing::warn!(target: "kube_runtime::watcher", "a kube warning");
            tracing::debug!(target: "hyper::proto", "hyper chatter");
        });
        // A launcher thread: info passes at plm verbosity 2, debug does not.
        on_thread("prrte-k8s-launch", &dispatch, || {
            tracing::info!("prted started in pod w-0");
            tracing::debug!("frame details");
        });
        // Elsewhere, by module: prrte_k8s::launch is the plm's, this test module nobody's.
        on_thread("other", &dispatch, || {
            tracing::error!(target: "prrte_k8s::launch", "agent gone");
            tracing::error!("not routed");
        });
        let got = seen.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                (
                    Framework::Ras,
                    1,
                    "ras:k8s: warning: cannot list pods yet; retrying (pod=w-1)".to_string()
                ),
                (
                    Framework::Ras,
                    1,
                    "ras:k8s: warning: a kube warning".to_string()
                ),
                (
                    Framework::Plm,
                    2,
                    "plm:k8s: prted started in pod w-0".to_string()
                ),
                (Framework::Plm, 1, "plm:k8s: error: agent gone".to_string()),
            ]
        );
        // Verbosity 0 (PRRTE's default): nothing at all.
        let (seen, sub) = capture();
        set_verbosity(Framework::Ras, 0);
        set_verbosity(Framework::Plm, 0);
        on_thread("other", &tracing::Dispatch::new(sub), || {
            tracing::warn!(target: "prrte_k8s::discovery", "quiet");
            tracing::error!(target: "prrte_k8s::launch", "quiet");
        });
        assert!(seen.lock().unwrap().is_empty());
        set_verbosity(Framework::Ras, -1);
        set_verbosity(Framework::Plm, -1);
    }
}
