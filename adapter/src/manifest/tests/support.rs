//! What the manifest's tests share: options parsed as the command line gives them, and the
//! objects they render.

use clap::Parser;
use serde_json::Value;

use crate::manifest::error::ManifestError;
use crate::manifest::options::ManifestArgs;
use crate::manifest::render;

#[derive(Parser)]
pub(crate) struct T {
    #[command(flatten)]
    pub(crate) a: ManifestArgs,
}

pub(crate) fn args(v: &[&str]) -> ManifestArgs {
    let mut argv = vec!["manifest"];
    argv.extend(v);
    T::try_parse_from(argv).unwrap().a
}

/// The objects of the job `a` describes.
pub(crate) fn objects(a: &ManifestArgs, key: Option<&str>) -> Result<Vec<Value>, ManifestError> {
    render::objects(&a.plan()?, key)
}
