export enum Status {
  Active = "active",
  Suspended = "suspended",
}

export enum Level {
  Low,
  Medium,
  High = 10,
  Higher,
}

export const enum Direction {
  Up = "UP",
  Down = "DOWN",
}

export enum Sign {
  Negative = -1,
  Zero = 0,
}

export interface Enums {
  status: Status;
  level: Level;
  direction: Direction;
  sign: Sign;
  onlyActive: Status.Active;
}
