//! What iopub gets of one cell's events, as ipykernel sends them: its trailing value as the
//! `execute_result`, not also as the stream text and display the worker wrote for other
//! hosts. Plain data, for the gateway's kernels and a ZMQ kernel alike.

use super::mapping::iopub_of;
use cellvisor::cell::CellEvent;
use serde_json::{json, Value};

/// One cell's events as iopub messages, as ipykernel sends them: its trailing value is the
/// `execute_result` at the end, not the text the worker printed for it (dropped from the
/// stdout that follows the value) nor the display of its rich form (dropped when it repeats
/// the value's own data).
#[derive(Debug, Default)]
pub struct CellOutputs {
    value: Option<Value>,
    /// What of the value's text is still to come on stdout.
    unprinted: String,
}

impl CellOutputs {
    /// The iopub message of `event`, if it has one.
    pub fn take(&mut self, event: &CellEvent) -> Option<(&'static str, Value)> {
        match event {
            CellEvent::Value { bundle, .. } => {
                let text = bundle["text/plain"].as_str().unwrap_or_default();
                self.unprinted = format!("{text}\n");
                self.value = Some(bundle.clone());
                None
            }
            CellEvent::Output { stream, text, .. }
                if *stream == "stdout" && !self.unprinted.is_empty() =>
            {
                let rest = if let Some(rest) = text.strip_prefix(self.unprinted.as_str()) {
                    self.unprinted.clear();
                    rest
                } else if let Some(left) = self.unprinted.strip_prefix(text.as_str()) {
                    self.unprinted = left.to_string();
                    ""
                } else {
                    // Not the value's text after all: shown as written.
                    self.unprinted.clear();
                    text.as_str()
                };
                (!rest.is_empty()).then(|| ("stream", json!({"name": stream, "text": rest})))
            }
            CellEvent::Display { bundle, .. } if self.repeats_value(bundle) => None,
            other => iopub_of(other),
        }
    }

    /// Whether a display is the value's rich form: every MIME type but `text/plain` it has
    /// (at least one) is the value's, with the same data.
    fn repeats_value(&self, bundle: &Value) -> bool {
        let (Some(value), Some(shown)) = (&self.value, bundle.as_object()) else {
            return false;
        };
        let mut rich = shown
            .iter()
            .filter(|(mime, _)| *mime != "text/plain")
            .peekable();
        rich.peek().is_some() && rich.all(|(mime, data)| value.get(mime) == Some(data))
    }

    /// The `execute_result` content of the cell's value, if it had one.
    pub fn execute_result(&self, execution_count: u64) -> Option<Value> {
        let value = self.value.as_ref()?;
        Some(json!({"data": value, "metadata": {}, "execution_count": execution_count}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bundle: Value) -> CellEvent {
        CellEvent::Value { index: 0, bundle }
    }

    fn stdout(text: &str) -> CellEvent {
        CellEvent::Output {
            index: 0,
            stream: "stdout",
            text: text.into(),
        }
    }

    #[test]
    fn a_trailing_value_is_the_execute_result_not_a_stream() {
        let mut outputs = CellOutputs::default();
        assert_eq!(
            outputs.take(&stdout("printed\n")).unwrap().1["text"],
            "printed\n"
        );
        assert_eq!(outputs.execute_result(1), None);
        assert_eq!(outputs.take(&value(json!({"text/plain": "42"}))), None);
        // The value's text, even in pieces, is not a stream.
        assert_eq!(outputs.take(&stdout("4")), None);
        assert_eq!(outputs.take(&stdout("2\n")), None);
        let result = outputs.execute_result(3).unwrap();
        assert_eq!(
            result,
            json!({"data": {"text/plain": "42"}, "metadata": {}, "execution_count": 3})
        );
        // What comes after it is shown.
        assert_eq!(outputs.take(&stdout("late\n")).unwrap().1["text"], "late\n");
    }

    #[test]
    fn the_rich_form_of_a_value_is_not_shown_twice_but_other_displays_are() {
        let mut outputs = CellOutputs::default();
        let json_value = json!({"application/json": {"a": [1]}, "text/plain": "{'a': [1]}"});
        outputs.take(&value(json_value.clone()));
        // Its text and more on one chunk: the rest is shown.
        assert_eq!(
            outputs.take(&stdout("{'a': [1]}\nafter\n")).unwrap().1["text"],
            "after\n"
        );
        let repeated = CellEvent::Display {
            index: 0,
            bundle: json!({"application/json": {"a": [1]}, "text/plain": "a literal"}),
        };
        assert_eq!(outputs.take(&repeated), None);
        let other = CellEvent::Display {
            index: 0,
            bundle: json!({"text/html": "<b>x</b>", "text/plain": "x"}),
        };
        assert_eq!(outputs.take(&other).unwrap().0, "display_data");
        let text_only = CellEvent::Display {
            index: 0,
            bundle: json!({"text/plain": "{'a': [1]}"}),
        };
        assert_eq!(outputs.take(&text_only).unwrap().0, "display_data");
        assert_eq!(outputs.execute_result(1).unwrap()["data"], json_value);
        // Output that is not the value's text is shown as written.
        let mut outputs = CellOutputs::default();
        outputs.take(&value(json!({"text/plain": "1"})));
        assert_eq!(
            outputs.take(&stdout("other\n")).unwrap().1["text"],
            "other\n"
        );
        assert_eq!(outputs.take(&stdout("1\n")).unwrap().1["text"], "1\n");
        let stderr = CellEvent::Output {
            index: 0,
            stream: "stderr",
            text: "1\n".into(),
        };
        assert_eq!(outputs.take(&stderr).unwrap().1["name"], "stderr");
    }
}
