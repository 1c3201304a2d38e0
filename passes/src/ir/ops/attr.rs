//! Attributes in the printed form: how each attribute type prints and reads back ([`Attr`]),
//! the few attributes with a form of their own (the codec modules), the reader of a node's
//! `{key=value, …}` block, and the [`op!`] declaration that puts them together per op.

pub(crate) use crate::ir::cursor::{by_name, serde_name};
use crate::ir::cursor::{quote, Cursor};
use crate::ir::op::{BagMode, GridPadding, Interpolation, ScatterReduce};
use crate::ir::types::{DType, Dim, Scalar};

/// Declares an op's struct with its printed name and attributes (see the module doc of
/// `ops` for the attribute specs), and implements [`OpDef`](super::OpDef)'s naming and
/// printing and [`ParseOp`](super::ParseOp) from that declaration.
macro_rules! op {
    ($(#[$m:meta])* pub struct $name:ident = $op:literal;) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name;

        impl $name {
            /// The printed name.
            pub const NAME: &'static str = $op;
        }

        impl $crate::ir::ops::OpSyntax for $name {
            fn name(&self) -> String {
                Self::NAME.into()
            }

            fn attrs(&self, _: &mut Vec<String>) {}
        }

        impl $crate::ir::ops::ParseOp for $name {
            fn parse(
                name: &str,
                _: &mut $crate::ir::ops::AttrReader<'_, '_>,
                _: &[Option<$crate::ir::Scalar>],
            ) -> Option<Result<Self, String>> {
                (name == Self::NAME).then_some(Ok($name))
            }
        }
    };
    ($(#[$m:meta])* pub struct $name:ident = $op:literal {
        $( $(#[$fm:meta])* pub $f:ident : $t:ty [$($spec:tt)*], )*
    }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq)]
        #[allow(missing_docs)] // attributes are named after the ATen op's arguments
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
        }

        impl $name {
            /// The printed name.
            pub const NAME: &'static str = $op;

            /// The attributes, read in the printed order.
            pub(crate) fn read_attrs(r: &mut $crate::ir::ops::AttrReader<'_, '_>) -> Result<Self, String> {
                Ok($name { $( $f: attr_read!(r, (), $t, $($spec)*)?, )* })
            }
        }

        impl $crate::ir::ops::OpSyntax for $name {
            fn name(&self) -> String {
                Self::NAME.into()
            }

            fn attrs(&self, out: &mut Vec<String>) {
                $( attr_write!(out, self.$f, $($spec)*); )*
            }
        }

        impl $crate::ir::ops::ParseOp for $name {
            fn parse(
                name: &str,
                r: &mut $crate::ir::ops::AttrReader<'_, '_>,
                _: &[Option<$crate::ir::Scalar>],
            ) -> Option<Result<Self, String>> {
                (name == Self::NAME).then(|| Self::read_attrs(r))
            }
        }
    };
    ($(#[$m:meta])* pub struct $name:ident = $prefix:literal + $kind:ident {
        $( $(#[$fm:meta])* pub $f:ident : $t:ty [$($spec:tt)*], )*
    }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq)]
        #[allow(missing_docs)] // attributes are named after the ATen op's arguments
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
        }

        impl $crate::ir::ops::OpSyntax for $name {
            fn name(&self) -> String {
                format!("{}{}", $prefix, $crate::ir::ops::serde_name(&self.$kind))
            }

            fn attrs(&self, out: &mut Vec<String>) {
                $( attr_write!(out, self.$f, $($spec)*); )*
            }
        }

        impl $crate::ir::ops::ParseOp for $name {
            fn parse(
                name: &str,
                r: &mut $crate::ir::ops::AttrReader<'_, '_>,
                _: &[Option<$crate::ir::Scalar>],
            ) -> Option<Result<Self, String>> {
                let kind = name.strip_prefix($prefix).and_then($crate::ir::ops::attr::by_name)?;
                let mut read = || -> Result<Self, String> { Ok($name { $( $f: attr_read!(r, kind, $t, $($spec)*)?, )* }) };
                Some(read())
            }
        }
    };
}

/// Prints one attribute by its spec.
macro_rules! attr_write {
    ($out:ident, $v:expr, $key:literal) => {
        $out.push(format!("{}={}", $key, $crate::ir::ops::attr::Attr::show(&$v)))
    };
    ($out:ident, $v:expr, $key:literal, optional) => {
        if !$crate::ir::ops::attr::is_default(&$v) {
            attr_write!($out, $v, $key)
        }
    };
    ($out:ident, $v:expr, $key:literal, via $codec:ident) => {
        $out.push(format!("{}={}", $key, $crate::ir::ops::attr::$codec::show(&$v)))
    };
    ($out:ident, $v:expr, flatten) => {
        $crate::ir::ops::OpSyntax::attrs(&$v, $out)
    };
    ($out:ident, $v:expr, kind) => {};
}

/// Reads one attribute by its spec.
macro_rules! attr_read {
    ($r:ident, $kind:tt, $t:ty, $key:literal) => {
        <$t as $crate::ir::ops::attr::Attr>::read($r.key($key)?)
    };
    ($r:ident, $kind:tt, $t:ty, $key:literal, optional) => {
        if $r.has($key) {
            <$t as $crate::ir::ops::attr::Attr>::read($r.key($key)?)
        } else {
            Ok(<$t>::default())
        }
    };
    ($r:ident, $kind:tt, $t:ty, $key:literal, via $codec:ident) => {
        $crate::ir::ops::attr::$codec::read($r.key($key)?)
    };
    ($r:ident, $kind:tt, $t:ty, flatten) => {
        <$t>::read_attrs($r)
    };
    ($r:ident, $kind:tt, $t:ty, kind) => {
        Ok::<_, String>($kind)
    };
}

/// An attribute type's printed form, and reading it back.
pub(crate) trait Attr: Sized {
    /// The value as printed after `key=`.
    fn show(&self) -> String;
    /// The value read back from what [`Attr::show`] printed.
    fn read(c: &mut Cursor<'_>) -> Result<Self, String>;
}

/// True when `v` is its type's default (an optional attribute left out).
pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn list<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let v: Vec<String> = items.iter().map(show).collect();
    format!("[{}]", v.join(", "))
}

/// The attribute types whose printed form is their `Display`, read by one `Cursor` method.
macro_rules! displayed {
    ($($t:ty => $read:ident),* $(,)?) => {
        $(
            impl Attr for $t {
                fn show(&self) -> String {
                    self.to_string()
                }

                fn read(c: &mut Cursor<'_>) -> Result<Self, String> {
                    c.$read()
                }
            }
        )*
    };
}

displayed!(i64 => int, usize => uint, bool => boolean, Scalar => scalar, Dim => dim, DType => dtype);

/// The enums printed by their serde names.
macro_rules! named {
    ($($t:ty),* $(,)?) => {
        $(
            impl Attr for $t {
                fn show(&self) -> String {
                    serde_name(self)
                }

                fn read(c: &mut Cursor<'_>) -> Result<Self, String> {
                    c.variant()
                }
            }
        )*
    };
}

named!(ScatterReduce, BagMode, Interpolation, GridPadding);

/// Floats print as [`Scalar`] prints them: exact, NaN payloads included.
impl Attr for f64 {
    fn show(&self) -> String {
        Scalar::Float(*self).to_string()
    }

    fn read(c: &mut Cursor<'_>) -> Result<Self, String> {
        c.float()
    }
}

impl Attr for String {
    fn show(&self) -> String {
        quote(self)
    }

    fn read(c: &mut Cursor<'_>) -> Result<Self, String> {
        c.string()
    }
}

impl<T: Attr> Attr for Option<T> {
    fn show(&self) -> String {
        self.as_ref().map_or_else(|| "none".to_string(), Attr::show)
    }

    fn read(c: &mut Cursor<'_>) -> Result<Self, String> {
        c.opt(T::read)
    }
}

impl<T: Attr> Attr for Vec<T> {
    fn show(&self) -> String {
        list(self, Attr::show)
    }

    fn read(c: &mut Cursor<'_>) -> Result<Self, String> {
        c.list(T::read)
    }
}

impl<T: Attr + Copy, const N: usize> Attr for [T; N] {
    fn show(&self) -> String {
        list(self, Attr::show)
    }

    fn read(c: &mut Cursor<'_>) -> Result<Self, String> {
        let v = c.list(T::read)?;
        let n = v.len();
        v.try_into().map_err(|_| format!("expected {N} values, found {n}"))
    }
}

/// A slice's end: `end` for "to the end" (`i64::MAX`).
pub(crate) mod slice_end {
    use super::{Attr, Cursor, Dim};

    pub(crate) fn show(end: &Dim) -> String {
        if *end == Dim::Static(i64::MAX) {
            "end".to_string()
        } else {
            end.show()
        }
    }

    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<Dim, String> {
        c.slice_end()
    }
}

/// Which positions of an advanced index hold an index tensor: `[idx, :, idx]`.
pub(crate) mod index_slots {
    use super::{list, Cursor};

    pub(crate) fn show(present: &[bool]) -> String {
        list(present, |&p| (if p { "idx" } else { ":" }).to_string())
    }

    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<Vec<bool>, String> {
        c.present()
    }
}

/// `upsample`'s mode: `bilinear` (true) or `nearest`.
pub(crate) mod upsample_mode {
    use super::Cursor;

    pub(crate) fn show(bilinear: &bool) -> String {
        (if *bilinear { "bilinear" } else { "nearest" }).to_string()
    }

    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<bool, String> {
        c.choice("bilinear", "nearest")
    }
}

/// `pad_mode`'s mode: `reflect` (true) or `replicate`.
pub(crate) mod pad_mode {
    use super::Cursor;

    pub(crate) fn show(reflect: &bool) -> String {
        (if *reflect { "reflect" } else { "replicate" }).to_string()
    }

    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<bool, String> {
        c.choice("reflect", "replicate")
    }
}

/// The ` {key=value, …}` block of a node, read key by key in the printer's order.
pub(crate) struct AttrReader<'c, 'a> {
    pub(crate) c: &'c mut Cursor<'a>,
    pub(crate) count: usize,
}

impl<'a> AttrReader<'_, 'a> {
    fn separator(&self) -> &'static str {
        if self.count == 0 {
            " {"
        } else {
            ", "
        }
    }

    /// True when the next attribute is `key`.
    pub(crate) fn has(&self, key: &str) -> bool {
        let rest = self.c.rest.strip_prefix(self.separator()).and_then(|r| r.strip_prefix(key));
        rest.is_some_and(|r| r.starts_with('='))
    }

    /// Reads `key=` and returns the cursor at its value.
    pub(crate) fn key(&mut self, key: &str) -> Result<&mut Cursor<'a>, String> {
        self.c.expect(&format!("{}{key}=", self.separator()))?;
        self.count += 1;
        Ok(&mut *self.c)
    }

    /// The attribute `key` when it comes next.
    pub(crate) fn opt_key<T>(
        &mut self,
        key: &str,
        value: impl FnOnce(&mut Cursor<'a>) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        if self.has(key) {
            value(self.key(key)?).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Reads the closing `}` when there were attributes.
    pub(crate) fn finish(self) -> Result<(), String> {
        if self.count > 0 {
            self.c.expect("}")?;
        }
        Ok(())
    }
}
