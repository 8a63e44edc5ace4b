use super::*;
use rmcp::model::ErrorCode;

/// A directory holding artifacts of sessions `mcp-7` and `mcp-77`, a sandboxed one of
/// `mcp-7`, and things that are not artifacts.
fn planted() -> (tempfile::TempDir, Artifacts) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("mcp-7-py-100-5.txt"), "whole output\n").unwrap();
    std::fs::write(root.join("mcp-7-js-wait-6-1.txt"), "waited\n").unwrap();
    std::fs::write(
        root.join("mcp-7-lua-101-7-part2.txt"),
        b"\x89PNG\r\n\x1a\n\x00\xff",
    )
    .unwrap();
    std::fs::write(root.join("mcp-77-py-100-9.txt"), "another session's\n").unwrap();
    std::fs::write(
        root.join("mcp-7-py-1-py-2-3.txt"),
        "a session named mcp-7-py-1\n",
    )
    .unwrap();
    std::fs::write(root.join("notes.txt"), "not an artifact\n").unwrap();
    std::fs::create_dir(root.join("mcp-7")).unwrap();
    std::fs::write(root.join("mcp-7/mcp-7-py-102-8.txt"), "sandboxed\n").unwrap();
    std::fs::write(root.join("secret"), "outside\n").unwrap();
    std::os::unix::fs::symlink(root.join("secret"), root.join("mcp-7-py-100-6.txt")).unwrap();
    let artifacts = Artifacts::new(root, "mcp-7");
    (dir, artifacts)
}

fn text(contents: &ResourceContents) -> Option<&str> {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => Some(text),
        _ => None,
    }
}

#[test]
fn a_session_lists_its_own_artifacts_only() {
    let (_dir, artifacts) = planted();
    let listed: Vec<(String, Option<u64>)> = artifacts
        .list()
        .into_iter()
        .map(|r| (r.uri, r.size))
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                "cellvisor://artifact/mcp-7-js-wait-6-1".to_string(),
                Some(7)
            ),
            (
                "cellvisor://artifact/mcp-7-lua-101-7-part2".to_string(),
                Some(10)
            ),
            ("cellvisor://artifact/mcp-7-py-100-5".to_string(), Some(13)),
            ("cellvisor://artifact/mcp-7-py-102-8".to_string(), Some(10)),
        ]
    );
}

#[test]
fn text_is_read_whole_and_binary_as_a_typed_blob() {
    let (_dir, artifacts) = planted();
    let read = artifacts
        .read("cellvisor://artifact/mcp-7-py-100-5")
        .unwrap();
    assert_eq!(text(&read), Some("whole output\n"));
    let sandboxed = artifacts
        .read("cellvisor://artifact/mcp-7-py-102-8")
        .unwrap();
    assert_eq!(text(&sandboxed), Some("sandboxed\n"));
    let blob = artifacts
        .read("cellvisor://artifact/mcp-7-lua-101-7-part2")
        .unwrap();
    match blob {
        ResourceContents::BlobResourceContents {
            blob, mime_type, ..
        } => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(blob)
                .unwrap();
            assert_eq!(bytes, b"\x89PNG\r\n\x1a\n\x00\xff");
            assert_eq!(mime_type.as_deref(), Some("image/png"));
        }
        other => panic!("not a blob: {other:?}"),
    }
}

#[test]
fn no_id_reads_outside_the_session_or_the_directory() {
    let (dir, artifacts) = planted();
    let refused = |uri: &str| {
        let err = artifacts.read(uri).expect_err(uri);
        assert_eq!(err.code, ErrorCode::RESOURCE_NOT_FOUND, "{uri}: {err:?}");
        err.message.to_string()
    };
    // Another session's artifact, even one whose name starts like this session's.
    assert!(refused("cellvisor://artifact/mcp-77-py-100-9").contains("this session"));
    assert!(refused("cellvisor://artifact/mcp-7-py-1-py-2-3").contains("this session"));
    // Paths of every kind.
    for bad in [
        "../secret",
        "..%2Fsecret",
        "mcp-7/../secret",
        "/etc/passwd",
        &dir.path().join("secret").display().to_string(),
        "mcp-7-py-100-5\0",
        "",
        "..",
    ] {
        let message = refused(&format!("cellvisor://artifact/{bad}"));
        assert!(message.contains("not an artifact id"), "{bad}: {message}");
    }
    // Dots are in ids (a session name's path component may hold them), but no file name
    // reaches past its own id.
    assert!(refused("cellvisor://artifact/mcp-7-py-100-5.txt").contains("this session"));
    // A link planted under an artifact's name is not followed.
    assert!(refused("cellvisor://artifact/mcp-7-py-100-6").contains("no artifact"));
    // Unknown, and not an artifact URI at all.
    assert!(refused("cellvisor://artifact/mcp-7-py-100-999").contains("no artifact"));
    assert!(refused("file:///etc/passwd").contains("cellvisor://artifact/<id>"));
    assert!(refused("cellvisor://artifacts/mcp-7-py-100-5").contains("no resource"));
}

#[test]
fn a_session_with_an_unsafe_name_finds_its_artifacts_by_its_file_safe_name() {
    let dir = tempfile::tempdir().unwrap();
    let owner = cellvisor::names::encode_component("my session");
    std::fs::write(dir.path().join(format!("{owner}-py-1-2.txt")), "x").unwrap();
    let artifacts = Artifacts::new(dir.path(), "my session");
    let listed = artifacts.list();
    assert_eq!(listed.len(), 1);
    assert!(artifacts.read(&listed[0].uri).is_ok());
}

#[test]
fn two_names_that_once_shared_a_file_name_see_only_their_own_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let dotted = cellvisor::names::encode_component("team.alpha");
    std::fs::write(dir.path().join(format!("{dotted}-py-1-2.txt")), "x").unwrap();
    let lookalike = Artifacts::new(dir.path(), "team_alpha-0466522c");
    assert!(lookalike.list().is_empty());
    assert_eq!(Artifacts::new(dir.path(), "team.alpha").list().len(), 1);
}
