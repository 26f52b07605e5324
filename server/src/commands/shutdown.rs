//! `tunefleet shutdown`: asks the master to stop gracefully, exactly as
//! SIGTERM would (stop accepting, tell every worker and client, put in-flight
//! jobs back in the queue without counting the attempt, commit, exit). Needs
//! the admin token.
//!
//! Returns once the master has confirmed with `shutting_down`; the master then
//! closes every connection, this one included, and exits by itself.

use super::ConnectArgs;

#[derive(clap::Args, Debug)]
pub struct ShutdownArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
}

pub async fn run(args: ShutdownArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    let url = client.url().to_owned();
    client
        .shutdown_master()
        .await
        .map_err(|e| args.connect.explain(e))?;
    // The master closes the socket itself; a polite close may find it gone.
    let _ = client.close().await;
    eprintln!("the master at {url} is shutting down");
    Ok(())
}
