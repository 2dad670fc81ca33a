//! The commands a person in the chat gives the bridge (`crate::command`),
//! answered here at once: before the conversation's queue, whatever its
//! harness is doing, and never handed to the harness. Each front door
//! (`serve`, the relay, `run`) asks [`Bridge::answer_command`] first and
//! sends the [`Answer`] as a run of its own ([`answer_results`]); what it
//! knows of its conversations' turns (to stop one, or say what runs) it
//! lends through [`Turns`].
//!
//! Who may use a command is the operator's (a binding's `commands`); every
//! command, done or refused, is one audit row.

mod destinations;
mod sessions;
mod status;
mod switch;

use async_trait::async_trait;

use super::Bridge;
use crate::command::{Access, Command, Decision, Invocation, Who};
use crate::host::{AuditEntry, HostApi, RunScope, now_ms};
use crate::protocol::{
    AgentRunContext, AgentRunResult, ErrorCode, Message, ResultPayload, RunCompleted,
};

pub(super) use switch::with_overrides;

/// A turn a front door has in flight for a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnNow {
    /// Its run.
    pub run_id: String,
    /// Its harness.
    pub harness: String,
    /// When it began (epoch milliseconds); `None`: it waits its turn.
    pub started_ms: Option<i64>,
    /// Who asked.
    pub actor: Option<String>,
}

/// What a front door knows of its conversations' turns.
#[async_trait]
pub trait Turns: Send + Sync {
    /// The conversation's turns in flight: the running one first, then
    /// those waiting, in order; an error says why they cannot be known
    /// (the shared store did not answer).
    async fn in_flight(&self, conversation: &str) -> Result<Vec<TurnNow>, String>;
    /// Ask the conversation's running turn to stop (its harness's own
    /// interrupt).
    async fn stop(&self, conversation: &str) -> Stopping;
}

/// What asking a conversation's running turn to stop came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopping {
    /// This turn was asked to stop.
    Asked(TurnNow),
    /// No turn runs.
    Nothing,
    /// It could not be asked (the shared store did not answer): why.
    Failed(String),
}

/// A front door that runs one turn and keeps none in flight (`run`).
pub struct NoTurns;

#[async_trait]
impl Turns for NoTurns {
    async fn in_flight(&self, _conversation: &str) -> Result<Vec<TurnNow>, String> {
        Ok(Vec::new())
    }
    async fn stop(&self, _conversation: &str) -> Stopping {
        Stopping::Nothing
    }
}

/// What a command came to: the sentence the person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The command.
    pub command: Command,
    /// What the person reads.
    pub text: String,
    /// Refused (not allowed, or not possible): nothing was changed.
    pub refused: bool,
    /// Refused because the asker may not use it here.
    pub forbidden: bool,
}

/// A command asked at a front door.
pub struct Asking<'a> {
    /// The run that carries it.
    pub ctx: &'a AgentRunContext,
    /// The harness the conversation runs on.
    pub harness: &'a str,
    /// The front door's turns.
    pub turns: &'a dyn Turns,
    /// Binding keys the operator fixed (`serve`'s `fixed_config`):
    /// `/model` and `/mode` do not change those.
    pub fixed: &'a [String],
}

/// What every command's code needs: the asking, read once.
struct Asked<'a> {
    asking: &'a Asking<'a>,
    host: &'a dyn HostApi,
    scope: RunScope,
    access: Access,
    binding: crate::projection::Binding<'a>,
    conversation: String,
    actor: Option<&'a str>,
    /// The card this run answers, when it is a card's submission.
    card: Option<String>,
}

impl Bridge {
    /// The command `ctx`'s message gives under its binding's prefix.
    /// A binding that cannot be read gives no commands: its run fails
    /// saying why, and no setting of the operator's is left off.
    pub fn command_in<'a>(ctx: &'a AgentRunContext, text: &'a str) -> Option<Invocation<'a>> {
        let binding = crate::projection::Binding::from_config(&ctx.config).ok()?;
        binding.commands.parse(text)
    }

    /// Answer the command `asking`'s message gives, if it gives one: the
    /// answer to send as the run's own, once audited. `None`: the message
    /// is the harness's.
    pub async fn answer_command(&self, asking: &Asking<'_>) -> Option<Answer> {
        let text = asking.ctx.input.to_text();
        // A card about a destination answered: the bridge's, never a turn.
        let card = destinations::card_answered(asking.ctx);
        let invocation = match &card {
            Some((_, command, args)) => Invocation {
                command: *command,
                args,
            },
            None => Self::command_in(asking.ctx, &text)?,
        };
        let binding = crate::projection::Binding::from_config(&asking.ctx.config).ok()?;
        let asked = Asked {
            asking,
            host: self.host().as_ref(),
            scope: RunScope::of(asking.ctx, &crate::harness::runner_id(asking.harness)),
            access: binding.commands.clone(),
            binding,
            conversation: asking.ctx.conversation_id().unwrap_or("_").to_string(),
            actor: asking
                .ctx
                .actor
                .as_ref()
                .and_then(|a| a.actor_id.as_deref()),
            card: card.map(|(id, _, _)| id),
        };
        let command = invocation.command;
        let who = asked.access.who(command);
        let answer = if !asked.may(&who).await {
            Answer {
                command,
                text: format!(
                    "Only {} may use {}{command} here.",
                    who.describe(),
                    asked.access.prefix
                ),
                refused: true,
                forbidden: true,
            }
        } else if asking.ctx.conversation_id().is_none()
            && !matches!(command, Command::Help | Command::Usage)
        {
            // Turns without a conversation share none: nothing of another
            // person's to show or stop.
            Answer {
                command,
                text: format!(
                    "This message belongs to no conversation, so {}{command} has nothing to act on.",
                    asked.access.prefix
                ),
                refused: true,
                forbidden: false,
            }
        } else {
            self.carry_out(&asked, invocation).await
        };
        asked.audit(&answer, invocation.args).await;
        tracing::info!(
            run_id = %asking.ctx.run_id,
            command = %command,
            refused = answer.refused,
            "answered a chat command"
        );
        Some(answer)
    }

    async fn carry_out(&self, asked: &Asked<'_>, invocation: Invocation<'_>) -> Answer {
        let command = invocation.command;
        let (text, refused) = match command {
            Command::Help => (asked.help().await, false),
            Command::Status => (status::status(self, asked).await, false),
            Command::Usage => (status::usage(self, asked).await, false),
            Command::Stop => (status::stop(asked).await, false),
            Command::New => sessions::new(self, asked).await,
            Command::Resume => sessions::resume(self, asked, invocation.args).await,
            Command::Model => switch::model(self, asked, invocation.args).await,
            Command::Mode => switch::mode(self, asked, invocation.args).await,
            Command::Allow | Command::Deny => {
                destinations::answer(self, asked, command, invocation.args).await
            }
        };
        Answer {
            command,
            text,
            refused,
            forbidden: false,
        }
    }
}

/// The roles the host reports for the actor (`actor.metadata.roles`, or
/// `role`), for `role:NAME` in who may.
fn roles(ctx: &AgentRunContext) -> Vec<String> {
    let Some(meta) = ctx.actor.as_ref().map(|a| &a.metadata) else {
        return Vec::new();
    };
    let mut roles: Vec<String> = meta
        .get("roles")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    roles.extend(
        meta.get("role")
            .and_then(|r| r.as_str())
            .map(str::to_string),
    );
    roles
}

impl Asked<'_> {
    /// Whether the asker is one of `who`.
    async fn may(&self, who: &Who) -> bool {
        match who.decide(self.actor, &roles(self.asking.ctx)) {
            Decision::Yes => true,
            Decision::No => false,
            Decision::IfParticipant => self.participates().await,
        }
    }

    /// Whether the asker has had a turn in this conversation (the ledger).
    async fn participates(&self) -> bool {
        let query = crate::host::usage::RunListQuery {
            actor: self.actor.map(str::to_string),
            conversation: Some(self.conversation.clone()),
            limit: 1,
            ..Default::default()
        };
        match self.host.usage_runs(query).await {
            Ok(runs) => !runs.is_empty(),
            Err(e) => {
                tracing::warn!("cannot tell whether the asker took part (the ledger: {e})");
                false
            }
        }
    }

    /// `/help`: the commands this person may use here.
    async fn help(&self) -> String {
        let mut lines = vec!["Commands here (answered by the bridge, not the agent):".to_string()];
        for declared in crate::command::COMMANDS {
            if !self.may(&self.access.who(declared.command)).await {
                continue;
            }
            let args = match declared.args {
                "" => String::new(),
                args => format!(" {args}"),
            };
            lines.push(format!(
                "{}{}{args} — {}",
                self.access.prefix, declared.word, declared.summary
            ));
        }
        lines.join("\n")
    }

    /// The command's one audit row.
    async fn audit(&self, answer: &Answer, args: &str) {
        let entry = AuditEntry {
            at_ms: now_ms(),
            run_id: self.asking.ctx.run_id.clone(),
            runner_id: self.scope.runner_id.clone(),
            action: "command".into(),
            resource: format!("command:{}", answer.command),
            scope: format!("conversation:{}", self.conversation),
            outcome: match (answer.forbidden, answer.refused) {
                (true, _) => ErrorCode::Unauthorized.to_string(),
                (false, true) => ErrorCode::InvalidArgument.to_string(),
                (false, false) => "ok".into(),
            },
            detail: format!(
                "{} by {}{}: {}",
                answer.command,
                self.actor.unwrap_or("someone unnamed"),
                match args {
                    "" => String::new(),
                    args => format!(" ({})", args.chars().take(80).collect::<String>()),
                },
                answer.text.lines().next().unwrap_or_default()
            ),
        };
        if let Err(e) = self.host.record_audit(entry).await {
            tracing::error!(error = %e, "could not write a command's audit row");
        }
    }
}

/// A command's answer as a run's results: the message, then the one
/// terminal (`run.completed`, finish reason `command`), numbered.
pub fn answer_results(run_id: &str, answer: &Answer) -> Vec<AgentRunResult> {
    let mut message = Message::assistant(answer.text.clone());
    message.extra.insert(
        "metadata".into(),
        serde_json::json!({"command": answer.command.word(), "refused": answer.refused}),
    );
    let payloads = [
        ResultPayload::MessageCompleted(crate::protocol::MessageCompleted {
            message: message.clone(),
            file_ids: Vec::new(),
        }),
        ResultPayload::RunCompleted(RunCompleted {
            finish_reason: "command".into(),
            message: Some(message),
        }),
    ];
    payloads
        .into_iter()
        .zip(1u64..)
        .map(|(payload, sequence)| {
            let mut result = AgentRunResult::new(run_id, payload);
            result.sequence = Some(sequence);
            result.timestamp = Some(now_ms() / 1000);
            result
        })
        .collect()
}

/// "3 min 12 s" ago, as a person reads an age.
fn age(since_ms: i64) -> String {
    let seconds = ((now_ms() - since_ms) / 1000).max(0);
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
    }
}
