use super::*;
use serde_json::json;

fn read(notebook: Value) -> Result<Suite, NotebookError> {
    parse(
        &notebook.to_string(),
        Path::new("dir/nb.ipynb"),
        "nb".into(),
    )
}

fn code(source: Value, outputs: Value) -> Value {
    json!({"cell_type": "code", "execution_count": 1, "metadata": {}, "source": source,
           "outputs": outputs})
}

#[test]
fn code_cells_become_cases_with_their_stored_outputs() {
    let suite = read(json!({
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
        "cells": [
            {"cell_type": "markdown", "source": "# title", "metadata": {}},
            code(json!(["print('a')\n", "1 + 1"]), json!([
                {"output_type": "stream", "name": "stdout", "text": ["a\n"]},
                {"output_type": "stream", "name": "stderr", "text": "warn\n"},
                {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                 "data": {"text/plain": ["2"], "text/html": "<b>2</b>"}},
                {"output_type": "display_data", "metadata": {},
                 "data": {"image/png": "iVBO", "text/plain": "<Figure>"}},
                {"output_type": "update_display_data", "metadata": {}, "data": {}},
            ])),
            code(json!("  \n"), json!([])),
            {"cell_type": "raw", "source": "raw", "metadata": {}},
            {"cell_type": "code", "execution_count": null, "metadata": {}, "outputs": [],
             "source": "1/0"},
            code(json!("boom"), json!([{"output_type": "error", "ename": "NameError",
                                        "evalue": "x", "traceback": []}])),
        ]
    }))
    .expect("a notebook");
    assert_eq!(suite.name, "nb");
    let info = suite.notebook.as_ref().expect("notebook info");
    assert_eq!(info.language, Language::Python);
    assert_eq!(
        (info.code_cells, info.skipped_cells, info.unexecuted),
        (3, 3, 1)
    );
    assert_eq!(info.dir, Path::new("dir"));
    let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["cell-001", "cell-002", "cell-003"]);
    let first = &suite.cases[0];
    assert_eq!(first.cells[0].code, "print('a')\n1 + 1");
    assert_eq!(first.cells[0].title.as_deref(), Some("In [1]"));
    let cell = first.notebook.as_ref().expect("cell");
    assert_eq!((cell.number, cell.position), (1, 1));
    let expected = &cell.expected;
    assert_eq!(
        (expected.stdout.as_str(), expected.stderr.as_str()),
        ("a\n", "warn\n")
    );
    let result = expected.result.as_ref().expect("a trailing value");
    assert_eq!(result.text, "2");
    assert_eq!(
        result.mimes.iter().map(String::as_str).collect::<Vec<_>>(),
        ["text/html", "text/plain"]
    );
    assert_eq!(expected.displays.len(), 1);
    assert!(expected.displays[0].contains("image/png"));
    assert_eq!(suite.cases[1].cells[0].title.as_deref(), Some("cell 2"));
    assert_eq!(
        suite.cases[1].notebook.as_ref().map(|n| n.position),
        Some(4)
    );
    let last = suite.cases[2].notebook.as_ref().expect("cell");
    assert_eq!(last.expected.error.as_deref(), Some("NameError"));
}

#[test]
fn the_kernel_language_picks_the_worker_or_is_refused() {
    let with = |metadata: Value| {
        read(json!({"metadata": metadata, "cells": [
        code(json!("1"), json!([]))]}))
    };
    let language = |metadata: Value| {
        with(metadata)
            .expect("a notebook")
            .notebook
            .map(|n| n.language)
    };
    assert_eq!(language(json!({})), Some(Language::Python));
    assert_eq!(
        language(json!({"language_info": {"name": "javascript"}})),
        Some(Language::JavaScript)
    );
    assert_eq!(
        language(json!({"kernelspec": {"language": "lua"}})),
        Some(Language::Lua)
    );
    assert_eq!(
        language(json!({"language_info": {"name": "python"}, "kernelspec": {"language": "R"}})),
        Some(Language::Python),
        "language_info wins"
    );
    let err = with(json!({"kernelspec": {"language": "R", "name": "ir"}})).unwrap_err();
    assert_eq!(err, NotebookError::Language("R".into()));
    assert!(
        err.to_string()
            .contains("python, javascript (as js) and lua"),
        "{err}"
    );
}

#[test]
fn what_is_not_a_notebook_is_refused_saying_why() {
    let refused = |text: &str| {
        parse(text, Path::new("x.ipynb"), "x".into())
            .unwrap_err()
            .to_string()
    };
    assert!(
        refused("{").contains("invalid JSON at line 1"),
        "{}",
        refused("{")
    );
    assert!(refused("[]").contains("top level must be a JSON object"));
    assert!(refused("{}").contains("`cells` must be an array"));
    assert!(refused(r#"{"worksheets": [], "nbformat": 3}"#).contains("nbformat 3"));
    assert!(refused(r#"{"nbformat": 5, "cells": []}"#).contains("nbformat 5 is not read"));
    let cell = |cell: Value| {
        read(json!({"cells": [
        {"cell_type": "markdown", "source": ""}, cell]}))
        .unwrap_err()
        .to_string()
    };
    assert_eq!(
        cell(json!({"cell_type": "code", "source": [1]})),
        "cell 1 (counted from 0): `source` must be a string or a list of strings"
    );
    assert!(cell(json!({"source": "x"})).contains("`cell_type` must be"));
    assert!(cell(code(json!("x"), json!({}))).contains("`outputs` must be an array"));
    let output = |output: Value| cell(code(json!("x"), json!([output])));
    assert!(
        output(json!({"output_type": "stream", "name": "stdlog", "text": ""}))
            .contains("output 0: a stream's `name`")
    );
    assert!(output(json!({"output_type": "execute_result"})).contains("`data` must be"));
    assert!(output(json!({"output_type": "error"})).contains("`ename` must be a string"));
    assert!(output(json!({"output_type": "widget"})).contains("unknown output_type \"widget\""));
}
