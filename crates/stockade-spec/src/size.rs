//! Byte sizes written the way people write them: `512m`, `1g`, `64MiB`, `1048576`.

use serde::{Deserialize, Deserializer, Serializer};

/// Parses a size such as `512m`, `1g`, `1.5G`, `64MiB`, `100k` or a plain byte count.
///
/// Suffixes are binary (`k` = 1024) whether or not they carry an `i`, as in Docker.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty size".to_string());
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let mult: u64 = match unit.trim_end_matches('b').trim_end_matches('i') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => {
            return Err(format!(
                "unknown size unit {unit:?} in {text:?} (use k, m, g or t)"
            ));
        }
    };
    if num.is_empty() {
        return Err(format!("size {text:?} has no number"));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("size {text:?} is not a number"))?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size {text:?} is out of range"));
    }
    Ok(bytes as u64)
}

/// Formats bytes compactly (`512MiB`), exact when the value is a whole unit.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (mult, name) in UNITS {
        if bytes >= mult && bytes.is_multiple_of(mult) {
            return format!("{}{name}", bytes / mult);
        }
    }
    format!("{bytes}B")
}

/// Serde helper: accepts a number of bytes or a size string; writes a number.
pub(crate) mod bytes_or_string {
    use super::*;

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(n),
            Raw::Text(t) => parse_size(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("64k").unwrap(), 64 << 10);
    }

    #[test]
    fn refuses_nonsense() {
        for bad in ["", "m", "12x", "-1", "1..2g", "lots"] {
            assert!(parse_size(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512 << 20), "512MiB");
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(1000), "1000B");
    }
}
