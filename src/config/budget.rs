//! A bound on how many values a config document stands for. A YAML alias repeats what its anchor names, so a
//! few hundred bytes can stand for millions of values (`a: &a [x, x, …]`, `b: &b [*a, *a, …]`, …): read into a
//! tree, one such document of 1 KiB took minutes and gigabytes. The document is walked first without keeping
//! anything, counting values, and refused past the bound.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

/// Far more than any config needs (a server is about ten values), far less than a tree that hurts.
pub const MAX_VALUES: usize = 100_000;

/// Whether `text` stands for at most [`MAX_VALUES`] values, its aliases repeated; a document YAML cannot
/// read is left to the reader that follows, which words its error.
pub fn check(text: &str) -> Result<(), serde_yaml_ng::Error> {
    let counted = Cell::new(0);
    match Counter(&counted).deserialize(serde_yaml_ng::Deserializer::from_str(text)) {
        Err(_) if counted.get() <= MAX_VALUES => Ok(()),
        result => result,
    }
}

/// Counts the values it is given into its cell, and fails once there are more than [`MAX_VALUES`].
#[derive(Clone, Copy)]
struct Counter<'c>(&'c Cell<usize>);

impl Counter<'_> {
    fn one<E: de::Error>(self) -> Result<(), E> {
        self.0.set(self.0.get() + 1);
        if self.0.get() > MAX_VALUES {
            return Err(E::custom(format_args!(
                "the document stands for more than {MAX_VALUES} values (YAML aliases repeat what their anchor \
                 names); write it out plainly"
            )));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Counter<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counter<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.one()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.one()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.one()
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.one()
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.one()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.one()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.one()
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<(), E> {
        self.one()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.one()
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.one()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.one()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.one()?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }

    /// A tagged value (`!tag value`): the tag, then the value.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let ((), value) = data.variant_seed(self)?;
        value.newtype_variant_seed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `levels` lists of `width` items, each item of a list an alias of the list before.
    fn aliases(levels: usize, width: usize) -> String {
        let mut text = format!("a0: &a0 [{}]\n", vec!["x"; width].join(", "));
        for level in 1..levels {
            text += &format!("a{level}: &a{level} [{}]\n", vec![format!("*a{}", level - 1); width].join(", "));
        }
        text
    }

    #[test]
    fn a_document_is_refused_once_its_aliases_stand_for_too_many_values() {
        assert!(check(&aliases(2, 300)).is_ok(), "90,000 values");
        let error = check(&aliases(3, 60)).unwrap_err().to_string();
        assert!(error.contains("the document stands for more than 100000 values"), "{error}");
    }

    #[test]
    fn every_kind_of_value_is_counted_and_broken_documents_are_left_to_the_reader() {
        let text = "a: [1, -2, 3.5, true, ~, '', !tag x, !!binary aGk=, {b: c}, 99999999999999999999999]\n";
        let counted = Cell::new(0);
        Counter(&counted).deserialize(serde_yaml_ng::Deserializer::from_str(text)).unwrap();
        assert_eq!(counted.get(), 16);
        for broken in ["a: [", "a: *missing", "---\na: 1\n---\nb: 2\n", "\t- x"] {
            assert!(check(broken).is_ok(), "{broken:?}");
        }
    }
}
