//! Python cells on a python child.
use crate::runtime::{Engine, Interrupt, Outbox, WorkerContext, WorkerError};
use cellvisor_ipc::{CellOutcome, ExecuteCell, Language};

pub struct PythonEngine;

impl PythonEngine {
    pub fn new(_context: &WorkerContext) -> Result<Self, WorkerError> {
        Err(WorkerError::Engine(
            "the Python engine is not built yet".into(),
        ))
    }
}

impl Engine for PythonEngine {
    const LANGUAGE: Language = Language::Python;
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
            "the Python engine is not built yet".into(),
        ))
    }
}
