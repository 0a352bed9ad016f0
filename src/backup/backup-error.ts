/** The client commands' failure with its exit code, apart so that a command that makes no request loads no HTTP client. */

/** A failure with its exit code (4: `changes` only, an expired token); the message is printed as it is. */
export class BackupError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2 | 3 | 4,
  ) {
    super(message);
  }
}
