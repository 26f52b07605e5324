//! The typed requests: each wraps [`Client::request`] and turns the reply
//! into the value a caller wants, so no caller matches on [`ReplyBody`].

use tunefleet_shared::protocol::{
    ClientCommand, JobId, JobView, ReplyBody, StatusReport, SubmitReport, TokenInfo,
};

use crate::errors::unexpected;
use crate::{Client, ClientError};

impl Client {
    /// Submits one workload file's text; `filename` appears in the master's
    /// error messages.
    pub async fn submit(
        &mut self,
        yaml: impl Into<String>,
        filename: Option<&str>,
    ) -> Result<SubmitReport, ClientError> {
        self.submit_as(yaml, filename, false).await
    }

    /// [`Client::submit`]; with `fresh`, new jobs are tuned from scratch even
    /// when the master's tuning cache could answer or warm-start them.
    pub async fn submit_as(
        &mut self,
        yaml: impl Into<String>,
        filename: Option<&str>,
        fresh: bool,
    ) -> Result<SubmitReport, ClientError> {
        let command = ClientCommand::Submit {
            yaml: yaml.into(),
            filename: filename.map(str::to_owned),
            fresh,
        };
        match self.request(command).await? {
            ReplyBody::Submitted(report) => Ok(report),
            other => Err(unexpected("submitted", &other)),
        }
    }

    /// Job counts and worker numbers.
    pub async fn status(&mut self) -> Result<StatusReport, ClientError> {
        match self.request(ClientCommand::Status).await? {
            ReplyBody::Status(report) => Ok(report),
            other => Err(unexpected("status", &other)),
        }
    }

    /// Full views of the given jobs (archived ones included), or of every
    /// job the master holds when `job_ids` is `None`.
    pub async fn results(
        &mut self,
        job_ids: Option<Vec<JobId>>,
    ) -> Result<Vec<JobView>, ClientError> {
        self.results_with(job_ids, false).await
    }

    /// [`Client::results`]; with `archived`, every job also brings the jobs
    /// archived by `--job-retention` (read from the master's database).
    pub async fn results_with(
        &mut self,
        job_ids: Option<Vec<JobId>>,
        archived: bool,
    ) -> Result<Vec<JobView>, ClientError> {
        match self
            .request(ClientCommand::Results { job_ids, archived })
            .await?
        {
            ReplyBody::Results { jobs } => Ok(jobs),
            other => Err(unexpected("results", &other)),
        }
    }

    /// Cancels a job (admin).
    pub async fn cancel(&mut self, job_id: &str) -> Result<(), ClientError> {
        let command = ClientCommand::Cancel {
            job_id: job_id.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::Cancelled { .. } => Ok(()),
            other => Err(unexpected("cancelled", &other)),
        }
    }

    /// Puts a failed or cancelled job back in the queue (admin).
    pub async fn retry(&mut self, job_id: &str) -> Result<(), ClientError> {
        let command = ClientCommand::Retry {
            job_id: job_id.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::Retried { .. } => Ok(()),
            other => Err(unexpected("retried", &other)),
        }
    }

    /// Creates a named admin token (needs the master's own admin token);
    /// returns its text, which the master does not keep.
    pub async fn create_token(&mut self, name: &str) -> Result<String, ClientError> {
        let command = ClientCommand::CreateToken {
            name: name.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::TokenCreated { token, .. } => Ok(token.0),
            other => Err(unexpected("token_created", &other)),
        }
    }

    /// Revokes a named admin token (needs the master's own admin token).
    pub async fn revoke_token(&mut self, name: &str) -> Result<(), ClientError> {
        let command = ClientCommand::RevokeToken {
            name: name.to_owned(),
        };
        match self.request(command).await? {
            ReplyBody::TokenRevoked { .. } => Ok(()),
            other => Err(unexpected("token_revoked", &other)),
        }
    }

    /// The named admin tokens (names and creation times).
    pub async fn list_tokens(&mut self) -> Result<Vec<TokenInfo>, ClientError> {
        match self.request(ClientCommand::ListTokens).await? {
            ReplyBody::Tokens { tokens } => Ok(tokens),
            other => Err(unexpected("tokens", &other)),
        }
    }

    /// Imports records to seed later jobs of the same workloads (admin; see
    /// `tunefleet_shared::import`).
    pub async fn import(
        &mut self,
        workloads: Vec<tunefleet_shared::import::ImportedWorkload>,
        keys: Vec<tunefleet_shared::import::WorkloadKey>,
    ) -> Result<tunefleet_shared::import::ImportReport, ClientError> {
        match self
            .request(ClientCommand::Import { workloads, keys })
            .await?
        {
            ReplyBody::Imported(report) => Ok(report),
            other => Err(unexpected("imported", &other)),
        }
    }

    /// Asks the master to stop gracefully, as SIGTERM does (admin). Returns
    /// once the master has confirmed; it then closes every connection, this
    /// one included.
    pub async fn shutdown_master(&mut self) -> Result<(), ClientError> {
        match self.request(ClientCommand::Shutdown).await? {
            ReplyBody::ShuttingDown => Ok(()),
            other => Err(unexpected("shutting_down", &other)),
        }
    }
}
