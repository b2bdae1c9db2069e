//! A real Kafka-protocol broker (tansu, from scripts/kafka-broker) on a loopback port,
//! and kafka-python (`tests/kafka/consume.py`) as the independent client that reads
//! the events back. Shared by the tests and `benches/events.rs`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct Broker {
    tansu: PathBuf,
    python: PathBuf,
    port: u16,
    process: Option<Child>,
}

impl Broker {
    /// Installs (first time only) and starts a broker with in-memory storage.
    pub fn start() -> Broker {
        let output = Command::new(crate::workspace_root().join("scripts/kafka-broker"))
            .arg("env")
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(output.status.success(), "scripts/kafka-broker env failed");
        let stdout = String::from_utf8(output.stdout).unwrap();
        let mut lines = stdout.lines();
        let tansu = PathBuf::from(lines.next().unwrap());
        let python = PathBuf::from(lines.next().unwrap());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut broker = Broker {
            tansu,
            python,
            port,
            process: None,
        };
        broker.resume();
        broker
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the broker process (again) on its port and waits until it accepts.
    pub fn resume(&mut self) {
        let url = format!("tcp://{}", self.address());
        let process = Command::new(&self.tansu)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.process = Some(process);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(self.address()).is_err() {
            assert!(std::time::Instant::now() < deadline, "tansu did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the broker process: clients see connections refused.
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// The consumer script's command: `consume.py BROKER TOPIC COUNT TIMEOUT`.
    pub fn consumer(&self, topic: &str, count: usize, timeout: Duration) -> Command {
        let mut command = Command::new(&self.python);
        command
            .arg(crate::workspace_root().join("tests/kafka/consume.py"))
            .args([&self.address(), topic])
            .arg(count.to_string())
            .arg(timeout.as_secs_f64().to_string());
        command
    }

    /// Reads `topic` from the start with kafka-python until `count` messages came or
    /// `timeout` passed: each `{"key", "partition", "offset", "value"}`.
    pub fn consume(&self, topic: &str, count: usize, timeout: Duration) -> Vec<Value> {
        let output = self.consumer(topic, count, timeout).output().unwrap();
        assert!(
            output.status.success(),
            "consume.py: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}
