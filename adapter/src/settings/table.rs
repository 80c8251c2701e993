//! A PRRTE component's parameters as one table: each [`Setting`] of the registry and the field
//! of the component's snapshot (the values as PMIx holds them, C types) that it fills.
//!
//! [`mca_table!`] declares both from one list: the snapshot struct, its [`Default`] (the
//! registry's defaults), the table ([`McaParams::PARAMS`], from which the `cabi` crate registers
//! the parameters with PMIx and reads them back) and the component's list of settings (which
//! `docs/admin-guide.md`'s table and the checks across settings walk).

use super::setting::Setting;

/// Where a parameter's value lives in a component's snapshot `P`, and its C type in PMIx.
pub enum Field<P> {
    /// A string (`char *`); `None` for NULL or empty.
    Str(fn(&mut P) -> &mut Option<String>),
    /// An `int`.
    Int(fn(&mut P) -> &mut i32),
    /// A `bool`.
    Bool(fn(&mut P) -> &mut bool),
}

/// One MCA parameter of a component: its registry entry (name, help, default) and the field of
/// the snapshot `P` it fills.
pub struct Param<P> {
    pub setting: &'static Setting,
    pub field: Field<P>,
}

/// A component's snapshot: its parameters' values as PMIx holds them.
pub trait McaParams: Default + Sized + 'static {
    /// Every parameter, in the order `prte_info` and the administrator's guide list them.
    const PARAMS: &'static [Param<Self>];
}

/// A bool default as written in the registry.
pub(crate) fn default_bool(s: &Setting) -> bool {
    s.default == "true"
}

/// A numeric default as PMIx stores it.
pub(crate) fn default_int(s: &Setting) -> i32 {
    s.default_u64() as i32
}

/// A string default (`None` without one).
pub(crate) fn default_text(s: &Setting) -> Option<String> {
    (!s.default.is_empty()).then(|| s.default.to_owned())
}

/// Declares a component's snapshot struct, its `Default` from the registry, its
/// [`McaParams`] table and the list of its settings, from one list of `field: Kind = SETTING`
/// (`Kind` one of [`Field`]'s: `Str`, `Int`, `Bool`).
macro_rules! mca_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident;
        $(#[$list_meta:meta])*
        pub const $list:ident;
        { $( $field:ident: $kind:ident = $setting:ident, )* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( pub $field: mca_table!(@type $kind), )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $( $field: mca_table!(@default $kind, $setting), )*
                }
            }
        }

        impl $crate::settings::table::McaParams for $name {
            const PARAMS: &'static [$crate::settings::table::Param<$name>] = &[
                $( $crate::settings::table::Param {
                    setting: &$setting,
                    field: $crate::settings::table::Field::$kind(|p| &mut p.$field),
                }, )*
            ];
        }

        $(#[$list_meta])*
        pub const $list: &[&$crate::settings::setting::Setting] = &[ $( &$setting, )* ];
    };
    (@type Str) => { Option<String> };
    (@type Int) => { i32 };
    (@type Bool) => { bool };
    (@default Str, $s:ident) => { $crate::settings::table::default_text(&$s) };
    (@default Int, $s:ident) => { $crate::settings::table::default_int(&$s) };
    (@default Bool, $s:ident) => { $crate::settings::table::default_bool(&$s) };
}
