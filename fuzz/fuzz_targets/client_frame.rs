//! A text frame on /ws/client, as the master parses it, including what a
//! request carries: a workload file (YAML or Lorien) or an ONNX model.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tunefleet_shared::protocol::{ClientCommand, ClientRequest};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(request) = serde_json::from_str::<ClientRequest>(text) else {
        return;
    };
    match &request.command {
        ClientCommand::Submit { yaml, filename, .. } => {
            let name = filename.as_deref().unwrap_or("upload.yaml");
            if tunefleet_shared::lorien::is_lorien_file(yaml) {
                let _ = tunefleet_shared::lorien::import_lorien(yaml, name, 64);
            } else {
                let _ = tunefleet_shared::workload::parse_workload_file(yaml, name);
            }
        }
        // The master's own upload check, as it runs on /ws/client.
        ClientCommand::SubmitModel { model } => {
            let _ = model.check_upload();
        }
        ClientCommand::CreateToken { name } | ClientCommand::RevokeToken { name } => {
            let _ = tunefleet_shared::protocol::check_token_name(name);
        }
        ClientCommand::Import { workloads, keys } => {
            for w in workloads {
                let _ = w.check();
            }
            for k in keys {
                let _ = k.check();
            }
        }
        _ => {}
    }
});
