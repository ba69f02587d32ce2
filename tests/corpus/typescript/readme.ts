// The README's example: a support ticket an LLM triages.

/** How urgent a ticket is. */
export type Priority = "low" | "normal" | "high" | "urgent";

export interface Customer {
  name: string;
  /** @format email */
  email: string;
}

/** A triaged support ticket. */
export interface Ticket {
  /** One line that says what is wrong. */
  summary: string;
  priority: Priority;
  customer: Customer;
  /** @minItems 1 */
  tags: string[];
  /**
   * How sure the model is.
   * @minimum 0
   * @maximum 1
   */
  confidence: number;
  dueBy?: Date;
}
