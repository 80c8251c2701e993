//! The enforcer: one sandbox's rules kept in step with its policies, pods and namespaces.

use super::nftables::{delete_table, nft, tables};
use super::render::render;
use crate::api::resources::{NAMESPACES, NETWORKPOLICIES, PODS};
use crate::api::Store;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast::error::RecvError;

/// Keeps one sandbox's NetworkPolicies enforced.
pub struct Enforcer {
    table: String,
    veths: String,
    store: Store,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The ruleset last loaded (None: no table).
    applied: Option<String>,
    stopped: bool,
}

impl Enforcer {
    /// `prefix` is the network's prefix: the table gets that name, and the rules look at
    /// frames from the veths named `<prefix>v...`.
    pub fn new(prefix: &str, store: Store) -> Enforcer {
        Enforcer {
            table: prefix.to_string(),
            veths: format!("{prefix}v*"),
            store,
            state: Mutex::new(State::default()),
        }
    }

    /// The nftables table (family bridge) this sandbox's rules live in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Recomputes the rules from the policies, pods and namespaces now in the store and loads
    /// them if they changed. Returns the ruleset in force (None when no policy exists).
    pub fn sync(&self) -> Result<Option<String>> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.stopped {
            bail!("the sandbox is stopping");
        }
        let list = |rt| {
            self.store
                .list(rt, None, &Default::default())
                .map(|l| l.items)
                .map_err(|e| anyhow!("{e}"))
        };
        let policies = list(&NETWORKPOLICIES)?;
        let refs = |v: &[Arc<Value>]| v.iter().map(|o| o.as_ref().clone()).collect::<Vec<Value>>();
        let want = if policies.is_empty() {
            None
        } else {
            let pods = list(&PODS)?;
            let namespaces = list(&NAMESPACES)?;
            Some(render(
                &self.table,
                &self.veths,
                &refs(&policies),
                &refs(&pods),
                &refs(&namespaces),
            ))
        };
        if want == st.applied {
            return Ok(want);
        }
        match &want {
            Some(text) => {
                // Create-if-missing, flush and fill in one transaction: never a moment without rules.
                let script = format!(
                    "table bridge {t} {{}}\ndelete table bridge {t}\n{text}",
                    t = self.table
                );
                nft(&["-f", "-"], Some(&script)).with_context(|| {
                    format!(
                        "loading the NetworkPolicy rules (table bridge {})",
                        self.table
                    )
                })?;
            }
            None => delete_table(&self.table)?,
        }
        st.applied = want.clone();
        Ok(want)
    }

    /// Deletes the table; no rule is loaded after this.
    pub fn stop(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.stopped = true;
        if st.applied.take().is_some() || !tables(&self.table).is_empty() {
            if let Err(e) = delete_table(&self.table) {
                tracing::warn!("removing nftables table {}: {e:#}", self.table);
            }
        }
    }

    /// Re-syncs on every change of a policy, pod or namespace until the store closes.
    pub async fn run(self: Arc<Self>) {
        let mut rx = self.store.subscribe();
        loop {
            let me = self.clone();
            match tokio::task::spawn_blocking(move || me.sync()).await {
                Ok(Err(e)) => tracing::error!("NetworkPolicies are not enforced: {e:#}"),
                Err(e) => tracing::error!("NetworkPolicy sync panicked: {e}"),
                Ok(Ok(_)) => {}
            }
            // Wait for a relevant change, then take whatever else is queued at once.
            loop {
                match rx.recv().await {
                    Ok(ev) if relevant(ev.resource.plural) => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                }
            }
            while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
                rx.try_recv()
            {}
        }
    }
}

fn relevant(plural: &str) -> bool {
    matches!(plural, "networkpolicies" | "pods" | "namespaces")
}

impl Drop for Enforcer {
    fn drop(&mut self) {
        self.stop();
    }
}
