//! What a custom resource's CustomResourceDefinition says beyond its names (kept with the
//! served [`super::resources::ResourceType`]; see [`super::crd`]).

use serde_json::Value;
use std::sync::{Arc, RwLock};

/// One printer column (`additionalPrinterColumns`, and Name first).
#[derive(Clone, Debug)]
pub struct Column {
    pub name: String,
    pub ty: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// A custom resource's schema and columns, replaced in place when its CRD changes.
pub struct CrdInfo {
    /// Where the store keeps the objects: "PLURAL.GROUP".
    pub key: &'static str,
    /// The CRD's name.
    pub crd_name: String,
    /// The version's `openAPIV3Schema`.
    schema: RwLock<Arc<Value>>,
    /// The version's columns.
    columns: RwLock<Arc<Vec<Column>>>,
}

impl CrdInfo {
    pub fn new(key: &'static str, crd_name: &str, schema: Value, columns: Vec<Column>) -> CrdInfo {
        CrdInfo {
            key,
            crd_name: crd_name.to_string(),
            schema: RwLock::new(Arc::new(schema)),
            columns: RwLock::new(Arc::new(columns)),
        }
    }
    pub fn schema(&self) -> Arc<Value> {
        self.schema
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    pub fn columns(&self) -> Arc<Vec<Column>> {
        self.columns
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    /// A changed CRD's schema and columns.
    pub fn replace(&self, schema: Value, columns: Vec<Column>) {
        *self.schema.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(schema);
        *self.columns.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(columns);
    }
}
