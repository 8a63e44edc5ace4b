//! The daemon's methods as typed values: a request's method is read once into a
//! [`MethodName`], and its params once into a [`Call`] whose variant holds the method's own
//! parameter type, so the daemon matches on variants, never on strings. The one table below
//! names each method, its constant in [`method`] and its parameters; the schema of the
//! protocol (`cellvisor protocol schema`) is read from the same table.

use super::{method, params, RpcError};
use crate::cell::EvalRequest;
use serde_json::Value;

/// Declares [`MethodName`] and [`Call`] from one table: `Variant = method::CONST` with the
/// parameter type of the methods that take parameters, then `=>` the result's type. The table's order is the order the
/// "method not found" error names them in.
macro_rules! calls {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:path $(, $params:ty)? => $result:ty;)*) => {
        /// The name of a method a client may call.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum MethodName {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl MethodName {
            /// Every method a client may call, in the order errors name them.
            pub const ALL: &'static [MethodName] = &[$(MethodName::$variant),*];

            /// The method called `name`; `None` for a method the daemon does not have.
            pub fn parse(name: &str) -> Option<MethodName> {
                match name {
                    $( $name => Some(MethodName::$variant), )*
                    _ => None,
                }
            }

            /// The method's name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( MethodName::$variant => $name, )*
                }
            }
        }

        /// A request's method with its parameters, read once (see [`Call::parse`]).
        #[derive(Debug, Clone)]
        pub enum Call {
            $( $(#[doc = $doc])* $variant $( (Box<$params>) )?, )*
        }

        impl Call {
            /// The call of method `name` with the request's `params` (absent: an empty
            /// object); bad params are refused as [`params`] refuses them. Methods without
            /// parameters ignore what they are sent.
            pub fn parse(name: MethodName, raw: Option<Value>) -> Result<Call, RpcError> {
                Ok(match name {
                    $( MethodName::$variant => Call::$variant $( (Box::new(params::<$params>(raw)?)) )?, )*
                })
            }

            /// The method this call is of.
            pub fn name(&self) -> MethodName {
                match self {
                    $( Call::$variant { .. } => MethodName::$variant, )*
                }
            }
        }

        /// The schema of each method's parameters, from the same table.
        #[cfg(feature = "schema")]
        impl MethodName {
            /// The schema of the method's parameters (`None`: it takes none).
            pub fn params_schema(
                self,
                generator: &mut schemars::SchemaGenerator,
            ) -> Option<schemars::Schema> {
                match self {
                    $( MethodName::$variant => None $( .or_else(|| Some(generator.subschema_for::<$params>())) )?, )*
                }
            }

            /// The schema of the method's result.
            pub fn result_schema(self, generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                match self {
                    $( MethodName::$variant => generator.subschema_for::<$result>(), )*
                }
            }
        }
    };
}

use super::files::{FilesDeleteParams, FilesListParams, FilesReadParams, FilesWriteParams};
// The results are read by the schema alone.
use super::session_params::{
    CheckpointParams, CheckpointsParams, NamesParams, SessionParams, TerminateParams, WaitParams,
};
#[cfg(feature = "schema")]
use super::{
    files::{FilesDeleteResult, FilesListResult, FilesReadResult, FilesWriteResult},
    results::{OwnResult, ReloadResult, SessionsReached, ShutdownResult},
    DrainResult, InitializeResult,
};
use super::{DrainParams, InitializeParams};
#[cfg(feature = "schema")]
use crate::{
    cell::{CellResult, EvalResult},
    state::{CheckpointInfo, RestoredState, SessionNames},
    status::{SessionStatus, ZygoteStatus},
};

calls! {
    /// `initialize`: the protocol and program versions, the languages, the daemon's pid.
    Initialize = method::INITIALIZE, InitializeParams => InitializeResult;
    /// `eval`: runs cells in a session.
    Eval = method::EVAL, EvalRequest => EvalResult;
    /// `wait`: watches a cell that went to the background.
    Wait = method::WAIT, WaitParams => CellResult;
    /// `terminate`: stops a cell that went to the background.
    Terminate = method::TERMINATE, TerminateParams => CellResult;
    /// `interrupt`: stops a session's running cell.
    Interrupt = method::INTERRUPT, SessionParams => SessionsReached;
    /// `reset`: replaces a session's workers with fresh ones.
    Reset = method::RESET, SessionParams => SessionsReached;
    /// `close`: ends a session's workers.
    Close = method::CLOSE, SessionParams => SessionsReached;
    /// `own`: ties a session to the calling connection, closed when the connection closes.
    Own = method::OWN, SessionParams => OwnResult;
    /// `status`: the sessions.
    Status = method::STATUS => Vec<SessionStatus>;
    /// `zygotes`: the Python zygotes.
    Zygotes = method::ZYGOTES => Vec<ZygoteStatus>;
    /// `checkpoint`: saves a session's namespace under a name.
    Checkpoint = method::CHECKPOINT, CheckpointParams => Vec<CheckpointInfo>;
    /// `restore`: replaces a session's namespace with a checkpoint.
    Restore = method::RESTORE, CheckpointParams => Vec<RestoredState>;
    /// `checkpoints`: lists a session's checkpoints.
    Checkpoints = method::CHECKPOINTS, CheckpointsParams => Vec<CheckpointInfo>;
    /// `names`: the user names of a session's namespace in one language.
    Names = method::NAMES, NamesParams => SessionNames;
    /// `files/list`: lists a session's workspace.
    FilesList = method::FILES_LIST, FilesListParams => FilesListResult;
    /// `files/read`: reads a file of a session's workspace.
    FilesRead = method::FILES_READ, FilesReadParams => FilesReadResult;
    /// `files/write`: writes a file into a session's workspace.
    FilesWrite = method::FILES_WRITE, FilesWriteParams => FilesWriteResult;
    /// `files/delete`: removes a file or directory of a session's workspace.
    FilesDelete = method::FILES_DELETE, FilesDeleteParams => FilesDeleteResult;
    /// `drain`: no new sessions; idle ones stopped.
    Drain = method::DRAIN, DrainParams => DrainResult;
    /// `undrain`: takes new sessions again.
    Undrain = method::UNDRAIN => DrainResult;
    /// `shutdown`: stops the daemon and its workers.
    Shutdown = method::SHUTDOWN => ShutdownResult;
    /// `config/reload`: rereads the configuration file.
    ConfigReload = method::CONFIG_RELOAD => ReloadResult;
}

impl MethodName {
    /// Whether the method names a session by its `session` param (`default` when absent).
    pub fn names_a_session(self) -> bool {
        !matches!(
            self,
            MethodName::Initialize
                | MethodName::Status
                | MethodName::Zygotes
                | MethodName::Drain
                | MethodName::Undrain
                | MethodName::Shutdown
                | MethodName::ConfigReload
        )
    }

    /// The error of a request for a method the daemon does not have, naming those it has.
    pub fn not_found(name: &str) -> RpcError {
        let names: Vec<&str> = MethodName::ALL.iter().map(|m| m.as_str()).collect();
        let (last, rest) = names.split_last().unwrap_or((&"", &[]));
        RpcError::new(
            super::code::METHOD_NOT_FOUND,
            format!(
                "method not found: {name}; the methods are {} and {last}",
                rest.join(", ")
            ),
        )
    }
}

impl Call {
    /// The session the call names (after the tenant step has filled it in), for the calls
    /// that name one.
    pub fn session(&self) -> Option<&str> {
        match self {
            Call::Eval(p) => Some(&p.session),
            Call::Wait(p) => Some(&p.session),
            Call::Terminate(p) => Some(&p.session),
            Call::Interrupt(p) | Call::Reset(p) | Call::Close(p) | Call::Own(p) => Some(&p.session),
            Call::Checkpoint(p) | Call::Restore(p) => Some(&p.session),
            Call::Checkpoints(p) => Some(&p.session),
            Call::Names(p) => Some(&p.session),
            Call::FilesList(p) => Some(&p.session),
            Call::FilesRead(p) => Some(&p.session),
            Call::FilesWrite(p) => Some(&p.session),
            Call::FilesDelete(p) => Some(&p.session),
            Call::Initialize(_)
            | Call::Status
            | Call::Zygotes
            | Call::Drain(_)
            | Call::Undrain
            | Call::Shutdown
            | Call::ConfigReload => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::code;
    use serde_json::json;

    #[test]
    fn every_name_reads_back_to_its_method() {
        for name in MethodName::ALL {
            assert_eq!(MethodName::parse(name.as_str()), Some(*name));
        }
        assert_eq!(MethodName::parse("Eval"), None);
        assert_eq!(MethodName::parse("eval/event"), None, "the daemon's own");
        assert_eq!(MethodName::parse("tool/call"), None, "the daemon's own");
    }

    #[test]
    fn the_unknown_method_error_names_every_method() {
        let err = MethodName::not_found("nope");
        assert_eq!(err.code, code::METHOD_NOT_FOUND);
        assert_eq!(
            err.message,
            "method not found: nope; the methods are initialize, eval, wait, terminate, \
             interrupt, reset, close, own, status, zygotes, checkpoint, restore, checkpoints, names, \
             files/list, files/read, files/write, files/delete, drain, undrain, shutdown \
             and config/reload"
        );
    }

    #[test]
    fn params_are_read_into_the_methods_type_or_refused_as_before() {
        let call = Call::parse(MethodName::Close, Some(json!({"session": "s"}))).unwrap();
        assert_eq!(call.name(), MethodName::Close);
        assert_eq!(call.session(), Some("s"));
        let err = Call::parse(MethodName::Close, Some(json!({"session": 1}))).unwrap_err();
        assert_eq!(err.code, code::INVALID_PARAMS);
        assert_eq!(
            err.message,
            params::<SessionParams>(Some(json!({"session": 1})))
                .unwrap_err()
                .message
        );
        // Methods without parameters ignore what they are sent, as they always did.
        let call = Call::parse(MethodName::Status, Some(json!({"x": 1}))).unwrap();
        assert!(matches!(call, Call::Status));
        assert_eq!(call.session(), None);
        // An eval without a session is the default session's.
        let call = Call::parse(MethodName::Eval, Some(json!({"cells": []}))).unwrap();
        assert_eq!(call.session(), Some("default"));
    }
}
