//! The README's table of MCA parameters, rendered from [`super::mca`].

use super::mca;
use super::setting::Setting;

/// The line before the table in `README.md`.
pub const BEGIN: &str =
    "<!-- MCA parameter table: rendered from adapter/src/settings/mca.rs, kept equal by its test -->";
/// The line after it.
pub const END: &str = "<!-- end of the MCA parameter table -->";

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn row(s: &Setting) -> String {
    let name = s.mca.map(|m| m.full).unwrap_or_default();
    let default = if s.default_doc.is_empty() {
        format!("`{}`", s.default)
    } else {
        cell(s.default_doc)
    };
    let mut meaning = cell(s.help);
    if !s.env.is_empty() {
        let vars: Vec<String> = s.env_names().map(|v| format!("`{v}`")).collect();
        meaning.push_str(&format!(
            "; in the environment {}, read by the launcher and the agents alike",
            vars.join(" or ")
        ));
    }
    format!("| `{name}` | {default} | {meaning} |\n")
}

/// The table, between its [`BEGIN`] and [`END`] lines.
pub fn mca_table() -> String {
    let mut out = format!("{BEGIN}\n\n| parameter | default | meaning |\n| --- | --- | --- |\n");
    for s in mca::RAS.iter().chain(mca::PLM.iter()) {
        out.push_str(&row(s));
    }
    out.push('\n');
    out.push_str(END);
    out.push('\n');
    out
}
