//! Reading what a user typed: `TEMPLATE:STEP`, `--property KEY=VALUE` and `KEY=JSON`, and the
//! step filters of the bulk commands.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::args::FilterArgs;
use crate::store::StepFilter;

pub(crate) fn split_step(text: &str) -> Result<(&str, &str)> {
    match text.split_once(':') {
        Some((t, s)) if !t.is_empty() && !s.is_empty() => Ok((t, s)),
        _ => bail!("{text:?}: expected TEMPLATE:STEP, e.g. accessionWF:shelve"),
    }
}

/// `KEY=VALUE` of `option`, the key not empty.
fn key_value<'a>(option: &str, item: &'a str) -> Result<(&'a str, &'a str)> {
    let (k, v) = item
        .split_once('=')
        .with_context(|| format!("{option} {item:?}: expected KEY=VALUE"))?;
    if k.is_empty() {
        bail!("{option} {item:?}: empty key");
    }
    Ok((k, v))
}

/// `KEY=JSON` of `option`: the value must be JSON.
fn key_json(option: &str, item: &str) -> Result<(String, Value)> {
    let (k, v) = key_value(option, item)?;
    crate::model::numbers::check_exact(v).with_context(|| format!("{option} {item:?}"))?;
    let value = serde_json::from_str(v).with_context(|| {
        format!("{option} {item:?}: {v:?} is not JSON (use --property for a string)")
    })?;
    Ok((k.to_string(), value))
}

/// Properties from `--property KEY=VALUE` (strings, as typed) and `--property-json KEY=JSON`.
pub(crate) fn parse_properties(
    strings: &[String],
    jsons: &[String],
) -> Result<BTreeMap<String, Value>> {
    let mut props = BTreeMap::new();
    for p in strings {
        let (k, v) = key_value("--property", p)?;
        props.insert(k.to_string(), Value::String(v.to_string()));
    }
    for p in jsons {
        let (k, v) = key_json("--property-json", p)?;
        props.insert(k, v);
    }
    Ok(props)
}

pub(crate) fn step_filter(f: &FilterArgs) -> Result<StepFilter> {
    let property = match (&f.property, &f.property_json) {
        (Some(p), _) => {
            let (k, v) = key_value("--property", p)?;
            Some((k.to_string(), Value::String(v.to_string())))
        }
        (None, Some(p)) => Some(key_json("--property-json", p)?),
        (None, None) => None,
    };
    Ok(StepFilter {
        objects: f.object.clone(),
        template: f.template.clone(),
        step: f.step.clone(),
        property,
        ..StepFilter::default()
    })
}
