//! Checking a daemon's command line against the grammar of what its launchers send: every
//! argument is an option of the grammar spelled out exactly (no abbreviation, no `--opt=value`,
//! no other case, no quotes), followed by exactly the values it takes, each of its shape; MCA
//! parameters are looked up in the grammar's lists ([`crate::protocol::params`]). The grammars
//! are described in [`crate::protocol::grammar`]: PRRTE's prted per release line in
//! [`crate::profile`], the other MPIs' daemons in [`super::daemons`]. Contact addresses are
//! pinned to the launcher's own address and the program a daemon starts others with must be the installed
//! `prrte-k8s-rsh`. The checked command line comes back, possibly rewritten (pinned URIs,
//! earlier duplicates of a URI dropped: the daemon takes the last one).

use std::net::IpAddr;
use std::path::Path;

use super::error::{PolicyError, Request};
use super::path::{as_passed, canonical};
use super::uri::{pin, rank, redirect, UriProblem};
use crate::profile::Profile;
use crate::protocol::grammar::{Arg, Check, Grammar, Tail};
use crate::protocol::params::{lookup, Origin, Project, Shape};

/// What the check needs to know of the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub req: Request,
    /// The launcher's address: the authenticated connection's peer.
    pub peer: IpAddr,
    /// The `prrte-k8s-rsh` installed with this agent, if there is one.
    pub rsh: Option<&'a Path>,
    /// The daemon's `PATH` (a bare `prrte-k8s-rsh` is looked up in it).
    pub path: Option<&'a str>,
    /// The daemon program.
    pub program: Option<&'a Path>,
    /// The PRRTE whose prted is checked (the image's, as the agent found it).
    pub prrte: &'static Profile,
}

impl Ctx<'_> {
    fn origin(&self) -> Origin {
        match self.req {
            Request::Launch => Origin::Launch,
            Request::Exec => Origin::Exec,
        }
    }
}

/// A URI argument seen while walking: its value's index and the parameter name.
struct UriArg {
    at: usize,
    name: String,
}

/// Checks `argv` against `g`; the checked (possibly rewritten) command line.
pub fn check(g: &Grammar, argv: &[String], ctx: &Ctx<'_>) -> Result<Vec<String>, PolicyError> {
    let mut out: Vec<String> = Vec::with_capacity(argv.len());
    let mut uris: Vec<UriArg> = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        let a = argv[i].as_str();
        let Some((_, arg)) = g.options.iter().find(|(o, _)| *o == a) else {
            if let (Tail::Program(name, tail), false) = (g.tail, a.starts_with('-')) {
                out.extend(check_tail(name, tail, &argv[i..], i, ctx)?);
                break;
            }
            return Err(unknown(g, ctx, i, a));
        };
        let (taken, passed) = match arg {
            Arg::Dropped => {
                i += 1;
                continue;
            }
            Arg::Flag => (1, None),
            Arg::Value(shape, check) => (2, value(g, argv, i, *shape, *check, ctx)?),
            Arg::Mca(project) => match mca(g, argv, i, *project, ctx)? {
                McaValue::Uri => {
                    uris.push(UriArg {
                        at: out.len() + 2,
                        name: argv[i + 1].clone(),
                    });
                    (3, None)
                }
                McaValue::Plain => (3, None),
                McaValue::Passed(v) => (3, Some(v)),
            },
        };
        out.extend(argv[i..i + taken].iter().cloned());
        if let Some(v) = passed {
            *out.last_mut().expect("a value was just added") = v;
        }
        i += taken;
    }
    pin_uris(g, out, &uris, ctx)
}

fn unknown(g: &Grammar, ctx: &Ctx<'_>, index: usize, arg: &str) -> PolicyError {
    let accepted: Vec<&str> = g.options.iter().map(|(o, _)| *o).collect();
    PolicyError::Option {
        req: ctx.req,
        index,
        arg: arg.to_owned(),
        daemon: g.daemon,
        accepted: accepted.join(", "),
    }
}

/// Checks the value of option `argv[i]`; the value to pass instead, if it is a path written
/// otherwise than canonically.
fn value(
    g: &Grammar,
    argv: &[String],
    i: usize,
    shape: Shape,
    check: Check,
    ctx: &Ctx<'_>,
) -> Result<Option<String>, PolicyError> {
    let name = argv[i].as_str();
    let Some(v) = argv.get(i + 1) else {
        return Err(PolicyError::Missing {
            index: i,
            flag: name.to_owned(),
            what: "a value",
        });
    };
    if !shape.accepts(v) {
        return Err(bad_value(i + 1, name, v, shape));
    }
    let peer_host = |host: &str| match host.parse::<IpAddr>() {
        Ok(h) if same_host(h, ctx.peer) => Ok(()),
        _ => Err(PolicyError::NotThePeer {
            index: i + 1,
            name: name.to_owned(),
            named: format!("{host} (give the launcher an address to hand out, not a name)"),
            peer: ctx.peer,
        }),
    };
    match check {
        Check::None => Ok(None),
        Check::PeerHost => peer_host(v).map(|()| None),
        Check::PeerHostPort => match v.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() => peer_host(host).map(|()| None),
            _ => Err(bad_value(i + 1, name, v, Shape::OneOf(&["HOST:PORT"]))),
        },
        Check::Rsh => rsh(i + 1, name, v, ctx).map(Some),
        Check::OwnDir => own_dir(i + 1, g, v, ctx).map(Some),
    }
}

fn bad_value(index: usize, name: &str, value: &str, shape: Shape) -> PolicyError {
    PolicyError::Value {
        index,
        name: name.to_owned(),
        value: value.to_owned(),
        expected: shape.describe(),
    }
}

/// Whether two addresses are the same host (an IPv4-mapped IPv6 address is its IPv4 one).
pub(crate) fn same_host(a: IpAddr, b: IpAddr) -> bool {
    let v4 = |x: IpAddr| match x {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(x, IpAddr::V4),
        v => v,
    };
    v4(a) == v4(b)
}

/// What becomes of a checked MCA value.
enum McaValue {
    /// Passed as it is.
    Plain,
    /// A URI, to pin.
    Uri,
    /// Passed as this (a path in its canonical form).
    Passed(String),
}

/// Checks the MCA pair after `argv[i]`.
fn mca(
    g: &Grammar,
    argv: &[String],
    i: usize,
    project: Project,
    ctx: &Ctx<'_>,
) -> Result<McaValue, PolicyError> {
    let flag = &argv[i];
    let (Some(name), Some(v)) = (argv.get(i + 1), argv.get(i + 2)) else {
        return Err(PolicyError::Missing {
            index: i,
            flag: flag.clone(),
            what: "a parameter name and a value",
        });
    };
    let param = lookup(&[g.params], project, name)
        .filter(|p| p.from(ctx.origin()))
        .ok_or_else(|| PolicyError::Parameter {
            req: ctx.req,
            index: i + 1,
            name: name.clone(),
            daemon: g.daemon,
        })?;
    if !param.shape.accepts(v) {
        return Err(bad_value(i + 2, name, v, param.shape));
    }
    match param.shape {
        Shape::Uri => Ok(McaValue::Uri),
        Shape::Rsh => rsh(i + 2, name, v, ctx).map(McaValue::Passed),
        _ => Ok(McaValue::Plain),
    }
}

/// `value` (words) names the installed `prrte-k8s-rsh`, with ssh's flags at most; the value to
/// pass (a path to it in its canonical form).
fn rsh(index: usize, name: &str, value: &str, ctx: &Ctx<'_>) -> Result<String, PolicyError> {
    let refuse = || PolicyError::NotRsh {
        index,
        name: name.to_owned(),
        value: value.to_owned(),
        installed: ctx.rsh.map(|p| p.display().to_string()),
    };
    let mut words = value.split(' ');
    let first = words.next().unwrap_or_default();
    let installed = ctx
        .rsh
        .and_then(|p| std::fs::canonicalize(p).ok())
        .ok_or_else(refuse)?;
    let (found, passed) = if first.contains('/') {
        // Passed canonical: the daemon resolves it where the request put it.
        let found = canonical(first).ok();
        let passed = found.as_ref().map(|c| as_passed(first, c));
        (found, passed)
    } else if Some(first) == installed.file_name().and_then(|n| n.to_str()) {
        // The daemon looks a bare name up in its PATH (the pod's, never the request's).
        let found = ctx.path.and_then(|path| {
            path.split(':')
                .filter(|d| d.starts_with('/'))
                .map(|d| Path::new(d).join(first))
                .find(|p| p.is_file())
                .and_then(|p| std::fs::canonicalize(p).ok())
        });
        (found, Some(first.to_owned()))
    } else {
        (None, None)
    };
    let flags: Vec<&str> = words.collect();
    let flags_only = flags.iter().all(|w| {
        w.len() > 1
            && w.starts_with('-')
            && w[1..]
                .chars()
                .all(|c| crate::protocol::grammar::SSH_FLAGS.contains(c))
    });
    match passed {
        Some(p) if found.is_some_and(|f| f == installed) && flags_only => {
            Ok(std::iter::once(p.as_str())
                .chain(flags)
                .collect::<Vec<_>>()
                .join(" "))
        }
        _ => Err(refuse()),
    }
}

/// `value` is the directory of the program itself (Intel MPI's `--base-path`); the value to
/// pass (canonical).
fn own_dir(index: usize, g: &Grammar, value: &str, ctx: &Ctx<'_>) -> Result<String, PolicyError> {
    let dir = ctx.program.and_then(Path::parent);
    let checked = canonical(value);
    let expected = || {
        format!(
            "the directory of {} itself ({})",
            g.daemon,
            dir.map(|d| d.display().to_string()).unwrap_or_default()
        )
    };
    match (dir, &checked) {
        (Some(d), Ok(v)) if std::fs::canonicalize(d).is_ok_and(|d| d == *v) => {
            Ok(as_passed(value, v))
        }
        _ => Err(PolicyError::Path {
            index,
            what: "--base-path",
            value: value.to_owned(),
            expected: match checked {
                Err(why) => format!("{} ({why})", expected()),
                Ok(_) => expected(),
            },
        }),
    }
}

/// The program after a bootstrap proxy's options: `<own dir>/<name>` and its own options.
fn check_tail(
    name: &str,
    g: &Grammar,
    argv: &[String],
    offset: usize,
    ctx: &Ctx<'_>,
) -> Result<Vec<String>, PolicyError> {
    let program = &argv[0];
    let expected = ctx.program.and_then(Path::parent).map(|d| d.join(name));
    let checked = canonical(program);
    let passed = match (&expected, &checked) {
        (Some(e), Ok(p)) if std::fs::canonicalize(e).is_ok_and(|e| e == *p) => {
            as_passed(program, p)
        }
        _ => {
            let why = checked.err().map(|w| format!(" ({w})")).unwrap_or_default();
            return Err(PolicyError::Path {
                index: offset,
                what: "the program to start",
                value: program.clone(),
                expected: format!(
                    "{}, next to the bootstrap proxy{why}",
                    expected
                        .map(|e| e.display().to_string())
                        .unwrap_or_else(|| name.into())
                ),
            });
        }
    };
    let rest = check(g, &argv[1..], ctx).map_err(|e| shift_index(e, offset + 1))?;
    Ok(std::iter::once(passed).chain(rest).collect())
}

/// `e` with its argument index moved by `by` (for a part checked on its own).
pub(crate) fn shift_index(mut e: PolicyError, by: usize) -> PolicyError {
    match &mut e {
        PolicyError::Option { index, .. }
        | PolicyError::Missing { index, .. }
        | PolicyError::Parameter { index, .. }
        | PolicyError::Value { index, .. }
        | PolicyError::NotThePeer { index, .. }
        | PolicyError::NotRsh { index, .. }
        | PolicyError::Path { index, .. } => *index += by,
        PolicyError::Env { .. } | PolicyError::DvmUriElsewhere { .. } => {}
    }
    e
}

/// Pins the daemon's contact URIs to the launcher's address; earlier duplicates of a URI
/// parameter are dropped (the daemon takes the last).
///
/// The daemon reports to its parent when one is given, else to the HNP; but a parent that
/// claims the HNP's rank is taken for the HNP (prted 3.0.8 then ignores the parent's URI and
/// contacts the HNP's addresses), so both URIs must list the launcher's address and are pinned
/// to it. Only a parent of another rank may come with an HNP URI naming other hosts (the
/// head, reached only through the parent): it is redirected to the launcher's address too, so
/// the daemon holds no other host's address.
fn pin_uris(
    g: &Grammar,
    mut out: Vec<String>,
    uris: &[UriArg],
    ctx: &Ctx<'_>,
) -> Result<Vec<String>, PolicyError> {
    let Some((hnp, parent)) = g.uris else {
        return Ok(out);
    };
    let last_of = |name: &str| uris.iter().rposition(|u| u.name == name);
    let (last_hnp, last_parent) = (last_of(hnp), last_of(parent));
    let hnp_behind_parent = match (last_hnp, last_parent) {
        (Some(h), Some(p)) => matches!(
            (rank(&out[uris[h].at]), rank(&out[uris[p].at])),
            (Ok(a), Ok(b)) if a != b
        ),
        _ => false,
    };
    let mut drop = Vec::new();
    for (k, u) in uris.iter().enumerate() {
        let last = Some(k) == last_hnp || Some(k) == last_parent;
        // Nothing was dropped yet: the index is the request's.
        let original = u.at;
        let problem = |p: UriProblem| match p {
            UriProblem::Malformed(why) => PolicyError::Value {
                index: original,
                name: u.name.clone(),
                value: out[u.at].clone(),
                expected: format!("{} ({why})", Shape::Uri.describe()),
            },
            UriProblem::Elsewhere(named) => PolicyError::NotThePeer {
                index: original,
                name: u.name.clone(),
                named,
                peer: ctx.peer,
            },
        };
        let pinned = match pin(&out[u.at], ctx.peer) {
            Err(UriProblem::Elsewhere(_)) if last && u.name == hnp && hnp_behind_parent => {
                redirect(&out[u.at], ctx.peer)
            }
            other => other,
        };
        match (last, pinned) {
            (true, Ok(p)) => out[u.at] = p,
            (true, Err(e)) | (false, Err(e @ UriProblem::Malformed(_))) => return Err(problem(e)),
            (false, _) => drop.push(u.at - 2),
        }
    }
    for at in drop.into_iter().rev() {
        out.drain(at..at + 3);
    }
    Ok(out)
}
