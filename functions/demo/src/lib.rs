//! The demo step functions of googleScannedBookWF and accessionWF.
//!
//! They do small but real work on files in the workspace folder (`WORKDO_WORKSPACE`): build MODS
//! from a catalogue record, "download" page scans, checksum and validate them, shelve them, write
//! a BagIt-style package with a SHA-256 manifest, and clean up. Like WorkDo robots they are
//! restartable: each checks what is already done and redoes it safely. Each binary in
//! `src/bin/` is a `main` of one line that hands one of these functions to the SDK.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use workdo_function::{Event, Failure, Outcome};

/// The workspace folder of one object: `WORKSPACE/<druid without prefix>`.
pub fn object_dir(event: &Event) -> Result<PathBuf, Failure> {
    let root = std::env::var("WORKDO_WORKSPACE").map_err(|_| {
        Failure::fatal("WORKDO_WORKSPACE is not set: the demo needs a workspace folder")
    })?;
    let id = event.object.trim_start_matches("druid:");
    if id.is_empty() || id.contains(['/', '\\']) || id.contains("..") {
        return Err(Failure::fatal(format!(
            "object id {:?} cannot name a folder",
            event.object
        )));
    }
    Ok(Path::new(&root).join("objects").join(id))
}

fn workspace(sub: &str) -> Result<PathBuf, Failure> {
    let root = std::env::var("WORKDO_WORKSPACE").map_err(|_| {
        Failure::fatal("WORKDO_WORKSPACE is not set: the demo needs a workspace folder")
    })?;
    Ok(Path::new(&root).join(sub))
}

fn prop<'a>(event: &'a Event, key: &str) -> Option<&'a Value> {
    event.properties.get(key)
}

fn flag(event: &Event, key: &str) -> bool {
    prop(event, key).and_then(Value::as_bool).unwrap_or(false)
}

fn text(event: &Event, key: &str) -> String {
    match prop(event, key) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn sha256_file(path: &Path) -> Result<String, Failure> {
    let bytes = fs::read(path)
        .map_err(|e| Failure::retryable(format!("cannot read {}: {e}", path.display())))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Page files of the object's content folder, sorted.
fn pages(dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    let content = dir.join("content");
    let mut files: Vec<PathBuf> = fs::read_dir(&content)
        .map_err(|e| Failure::retryable(format!("no content in {}: {e}", content.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    Ok(files)
}

/// MODS built from the catalogue record in the object's properties.
pub fn descriptive_metadata(event: &Event) -> Result<Outcome, Failure> {
    let title = text(event, "title");
    if title.is_empty() {
        return Err(Failure::fatal(format!(
            "catalogue record {} has no title",
            text(event, "catkey")
        )));
    }
    let mods = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<mods xmlns=\"http://www.loc.gov/mods/v3\" version=\"3.7\">\n  <titleInfo><title>{}</title></titleInfo>\n  <name type=\"personal\"><namePart>{}</namePart><role><roleTerm type=\"text\">author</roleTerm></role></name>\n  <recordInfo><recordIdentifier source=\"SIRSI\">{}</recordIdentifier></recordInfo>\n  <identifier type=\"barcode\">{}</identifier>\n</mods>\n",
        xml_escape(&title),
        xml_escape(&text(event, "author")),
        xml_escape(&text(event, "catkey")),
        xml_escape(&text(event, "barcode")),
    );
    Ok(Outcome::completed()
        .document("descMetadata", mods)
        .note(format!("MODS for catkey {}", text(event, "catkey"))))
}

/// Ask the (simulated) scanning service to convert the scans: records when it was asked.
pub fn google_convert(event: &Event) -> Result<Outcome, Failure> {
    let dir = object_dir(event)?;
    fs::create_dir_all(&dir)?;
    let marker = dir.join("convert-requested");
    if !marker.exists() {
        fs::write(&marker, text(event, "barcode"))?;
    }
    Ok(Outcome::completed().note("conversion requested"))
}

/// Fetch the converted page scans into the workspace. Slow scans are not ready on the first
/// try (defer); flaky downloads fail once; unknown barcodes fail every time.
pub fn google_download(event: &Event) -> Result<Outcome, Failure> {
    let barcode = text(event, "barcode");
    if flag(event, "barcode_missing") {
        return Err(
            Failure::retryable(format!("Item for barcode {barcode} not found")).text(format!(
                "GET /grin/{barcode}: 404 Not Found (attempt {} of {})",
                event.attempt, event.max_attempts
            )),
        );
    }
    let dir = object_dir(event)?;
    fs::create_dir_all(&dir)?;
    let waited = dir.join("scan-waited");
    if flag(event, "slow_scan") && !waited.exists() {
        fs::write(&waited, "")?;
        return Ok(Outcome::defer(0.3).note("scan not ready yet"));
    }
    if flag(event, "flaky_download") && event.attempt == 1 {
        return Err(Failure::retryable("connection reset while downloading"));
    }
    let content = dir.join("content");
    fs::create_dir_all(&content)?;
    let n = prop(event, "pages")
        .and_then(Value::as_u64)
        .unwrap_or(3)
        .clamp(1, 1000);
    for page in 1..=n {
        let path = content.join(format!("page-{page:04}.txt"));
        let body = format!(
            "PAGE {page} of {}\nbarcode {barcode}\n{}\n",
            event.object,
            "lorem ipsum ".repeat(page as usize)
        );
        fs::write(path, body)?;
    }
    Ok(Outcome::completed().note(format!("downloaded {n} pages")))
}

/// Checksums and validation of every page; technical metadata as a document.
pub fn process_content(event: &Event) -> Result<Outcome, Failure> {
    let dir = object_dir(event)?;
    let files = pages(&dir)?;
    if files.is_empty() {
        return Err(Failure::retryable("no page files to process"));
    }
    let mut entries = Vec::new();
    for f in &files {
        let body = fs::read_to_string(f)?;
        if !body.starts_with("PAGE ") {
            return Err(Failure::fatal(format!(
                "{} is not a page scan",
                f.display()
            )));
        }
        let sha256 = workdo_function::span("checksum", || sha256_file(f))?;
        entries.push(json!({
            "file": f.file_name().and_then(|n| n.to_str()).unwrap_or_default(),
            "size": body.len(),
            "sha256": sha256,
        }));
    }
    let tech = json!({ "object": event.object, "files": entries });
    Ok(Outcome::completed()
        .document("technicalMetadata", tech.to_string())
        .property("page_count", files.len())
        .note(format!("{} files checksummed and valid", files.len())))
}

/// Copy the content into the Digital Stacks.
pub fn shelve(event: &Event) -> Result<Outcome, Failure> {
    let dir = object_dir(event)?;
    let stacks = workspace("stacks")?.join(event.object.trim_start_matches("druid:"));
    fs::create_dir_all(&stacks)?;
    let files = pages(&dir)?;
    for f in &files {
        if let Some(name) = f.file_name() {
            fs::copy(f, stacks.join(name))?;
        }
    }
    Ok(Outcome::completed().note(format!("{} files shelved", files.len())))
}

/// A BagIt-style package for preservation: content, metadata and a SHA-256 manifest.
pub fn sdr_ingest_transfer(event: &Event) -> Result<Outcome, Failure> {
    let dir = object_dir(event)?;
    let bag = workspace("sdr")?.join(event.object.trim_start_matches("druid:"));
    let data = bag.join("data");
    fs::create_dir_all(data.join("content"))?;
    fs::create_dir_all(data.join("metadata"))?;
    let mut manifest = String::new();
    for f in pages(&dir)? {
        if let Some(name) = f.file_name().and_then(|n| n.to_str()) {
            let target = data.join("content").join(name);
            fs::copy(&f, &target)?;
            manifest.push_str(&format!("{}  data/content/{name}\n", sha256_file(&target)?));
        }
    }
    let mods = event
        .documents
        .get("descMetadata")
        .ok_or_else(|| Failure::fatal("no descMetadata document to package"))?;
    let mods_path = data.join("metadata").join("descMetadata.xml");
    fs::write(&mods_path, mods)?;
    manifest.push_str(&format!(
        "{}  data/metadata/descMetadata.xml\n",
        sha256_file(&mods_path)?
    ));
    fs::write(
        bag.join("bagit.txt"),
        "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n",
    )?;
    fs::write(
        bag.join("bag-info.txt"),
        format!(
            "External-Identifier: {}\nPayload-Oxum: {}\n",
            event.object,
            manifest.lines().count()
        ),
    )?;
    fs::write(bag.join("manifest-sha256.txt"), &manifest)?;
    Ok(Outcome::completed().note(format!("bag with {} files", manifest.lines().count())))
}

/// Clear the object's working copy and hand it to accessioning.
pub fn cleanup(event: &Event) -> Result<Outcome, Failure> {
    let dir = object_dir(event)?;
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    Ok(Outcome::completed()
        .note("workspace cleared")
        .start("accessionWF"))
}

/// Technical metadata of the shelved files.
pub fn technical_metadata(event: &Event) -> Result<Outcome, Failure> {
    let stacks = workspace("stacks")?.join(event.object.trim_start_matches("druid:"));
    let n = fs::read_dir(&stacks)
        .map_err(|e| Failure::retryable(format!("nothing shelved at {}: {e}", stacks.display())))?
        .count();
    Ok(Outcome::completed()
        .property("shelved_files", n)
        .note(format!("{n} files described")))
}

/// The object is accessioned.
pub fn end_accession(_event: &Event) -> Result<Outcome, Failure> {
    Ok(Outcome::completed().note("accessioned"))
}
