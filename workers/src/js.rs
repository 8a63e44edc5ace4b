//! JavaScript cells on QuickJS.
use crate::runtime::{Engine, Interrupt, Outbox, WorkerContext, WorkerError};
use cellvisor_ipc::{CellOutcome, ExecuteCell, Language};

pub struct JsEngine;

impl JsEngine {
    pub fn new(_context: &WorkerContext) -> Result<Self, WorkerError> {
        Err(WorkerError::Engine(
            "the JavaScript engine is not built yet".into(),
        ))
    }
}

impl Engine for JsEngine {
    const LANGUAGE: Language = Language::JavaScript;
    fn engine_name(&self) -> String {
        String::new()
    }
    fn execute(
        &mut self,
        _: &ExecuteCell,
        _: &Outbox,
        _: &Interrupt,
    ) -> Result<CellOutcome, WorkerError> {
        Err(WorkerError::Engine(
            "the JavaScript engine is not built yet".into(),
        ))
    }
}
