//! `URL` and `URLSearchParams` on the `url` crate, which implements the WHATWG URL standard
//! (its `quirks` module is the standard's JavaScript API: getters and setters by name).

use url::{form_urlencoded, quirks, Url};

/// The parts of a URL, in the order `URL` in `globals.js` reads them.
pub(super) type Parts = [String; 11];

/// Parses `input` against `base` (WHATWG rules); the error says what was wrong.
pub(super) fn parse(input: &str, base: Option<&str>) -> Result<Parts, String> {
    let url = match base {
        Some(base) => {
            let base =
                Url::parse(base).map_err(|err| format!("Invalid base URL {base:?}: {err}"))?;
            base.join(input)
        }
        None => Url::parse(input),
    }
    .map_err(|err| format!("Invalid URL {input:?}: {err}"))?;
    Ok(parts(&url))
}

fn parts(url: &Url) -> Parts {
    [
        quirks::href(url).to_string(),
        quirks::origin(url),
        quirks::protocol(url).to_string(),
        quirks::username(url).to_string(),
        quirks::password(url).to_string(),
        quirks::host(url).to_string(),
        quirks::hostname(url).to_string(),
        quirks::port(url).to_string(),
        quirks::pathname(url).to_string(),
        quirks::search(url).to_string(),
        quirks::hash(url).to_string(),
    ]
}

/// `url[part] = value`: the new href. A value the standard ignores leaves the URL as it was;
/// only `href` can fail.
pub(super) fn set(href: &str, part: &str, value: &str) -> Result<String, String> {
    let mut url = Url::parse(href).map_err(|err| format!("Invalid URL {href:?}: {err}"))?;
    match part {
        "href" => quirks::set_href(&mut url, value)
            .map_err(|err| format!("Invalid URL {value:?}: {err}"))?,
        "protocol" => drop(quirks::set_protocol(&mut url, value)),
        "username" => drop(quirks::set_username(&mut url, value)),
        "password" => drop(quirks::set_password(&mut url, value)),
        "host" => drop(quirks::set_host(&mut url, value)),
        "hostname" => drop(quirks::set_hostname(&mut url, value)),
        "port" => drop(quirks::set_port(&mut url, value)),
        "pathname" => quirks::set_pathname(&mut url, value),
        "search" => quirks::set_search(&mut url, value),
        "hash" => quirks::set_hash(&mut url, value),
        other => return Err(format!("URL has no settable part {other:?}")),
    }
    Ok(quirks::href(&url).to_string())
}

/// `application/x-www-form-urlencoded` text as name/value lists.
pub(super) fn parse_query(query: &str) -> (Vec<String>, Vec<String>) {
    let query = query.strip_prefix('?').unwrap_or(query);
    form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .unzip()
}

/// Name/value lists as `application/x-www-form-urlencoded` text.
pub(super) fn serialize_query(names: &[String], values: &[String]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(names.iter().zip(values))
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resolves_and_sets_like_whatwg() {
        let parts = parse("../b?x=1#h", Some("https://u:p@example.com:8080/a/c")).unwrap();
        assert_eq!(parts[0], "https://u:p@example.com:8080/b?x=1#h");
        assert_eq!(parts[1], "https://example.com:8080");
        assert_eq!(parts[7], "8080");
        assert_eq!(parts[9], "?x=1");
        assert_eq!(parts[10], "#h");
        assert!(parse("not a url", None)
            .unwrap_err()
            .contains("Invalid URL"));
        let moved = set("http://a.test/x", "port", "81").unwrap();
        assert_eq!(moved, "http://a.test:81/x");
        assert_eq!(
            set("http://a.test/x", "port", "nope").unwrap(),
            "http://a.test/x"
        );
    }

    #[test]
    fn form_encoding_round_trips() {
        let (names, values) = parse_query("?a=1&b=x+y&c=%C3%A9");
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(values, ["1", "x y", "é"]);
        assert_eq!(serialize_query(&names, &values), "a=1&b=x+y&c=%C3%A9");
    }
}
