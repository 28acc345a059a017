/** A store cannot be opened (its file, directory or database); the message says which and what to do. */
export class StoreOpenError extends Error {
  override readonly name = "StoreOpenError";
  constructor(
    message: string,
    /** The database file, or the database URL without its password. */
    readonly path: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "StoreOpenError";
  }
}
